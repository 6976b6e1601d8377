// Waiting for a job's ranks (see launcher.h): reaping them, forwarding and recording the launcher's
// signals, stopping the others after a failure, and the job's status that names the rank and its
// cause. Job::Create and Job::Start are in launcher.cc.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <system_error>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/env/cluster_environment.h"
#include "core/env/run_dir.h"
#include "core/launch/child_process.h"
#include "core/launch/forkserver.h"
#include "core/launch/launcher.h"
#include "core/launch/membership.h"
#include "core/launch/waited_for.h"
#include "core/launch/worker_channel.h"
#include "core/trace/flight_recorder.h"
#include "core/util/enum_names.h"
#include "core/util/files.h"
#include "core/util/process_state.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(2);
// How long a rank's failing exit waits for a peer killed by a signal, the more likely cause, before
// the launcher stops the others (see Wait()).
constexpr absl::Duration kCauseWindow = absl::Milliseconds(100);

// Elastic: ranks lost within this long of each other are dropped in one membership change (a node's
// ranks, a kill of several), so that the survivors do not form a group with a rank about to go.
constexpr absl::Duration kLossWindow = absl::Milliseconds(50);

// The signal (SIGINT/SIGTERM) the launcher received while waiting, and how many.
volatile sig_atomic_t g_received_signal = 0;
volatile sig_atomic_t g_received_count = 0;
// The signal that stopped the latest job (SignalThatStoppedLastJob()).
std::atomic<int> g_stopping_signal{0};

// Whether a failed rank's end is more likely the job's cause than a failing exit: a signal, except
// SIGPIPE, which a rank gets for writing to a connection whose peer had already gone (the peer is
// the cause, and may be reaped later).
bool EndedBySignalOfItsOwn(const RankOutcome& outcome) {
  return outcome.state == RankState::kSignaled && outcome.signal != SIGPIPE;
}

void RecordSignal(int sig) {
  g_received_signal = sig;
  g_received_count = g_received_count + 1;
}

// SIGUSR1 or SIGUSR2 the launcher received and has not yet passed to the ranks (SLURM's warning
// before it ends a job; see TrainerOptions::checkpoint_on_signal).
volatile sig_atomic_t g_passed_on_signal = 0;

void RecordPassedOnSignal(int sig) { g_passed_on_signal = sig; }

// Routes SIGINT and SIGTERM to RecordSignal, SIGUSR1 and SIGUSR2 to RecordPassedOnSignal, while
// alive; restores the old handlers after.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    g_stopping_signal = 0;
    g_received_signal = 0;
    g_received_count = 0;
    struct sigaction action = {};
    action.sa_handler = RecordSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
    g_passed_on_signal = 0;
    action.sa_handler = RecordPassedOnSignal;
    sigaction(SIGUSR1, &action, &old_usr1_);
    sigaction(SIGUSR2, &action, &old_usr2_);
  }
  ~ForwardedSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGUSR1, &old_usr1_, nullptr);
    sigaction(SIGUSR2, &old_usr2_, nullptr);
  }

 private:
  struct sigaction old_int_ = {};
  struct sigaction old_term_ = {};
  struct sigaction old_usr1_ = {};
  struct sigaction old_usr2_ = {};
};

// Why `ranks`, which the launcher was stopping with `stop_signal`, got SIGKILL: a second signal to
// the launcher, or the end of the grace period. Empty without ranks.
std::string DescribeEscalation(const std::vector<int>& ranks, bool second_signal, int stop_signal,
                               absl::Duration grace_period) {
  if (ranks.empty()) return "";
  const bool one = ranks.size() == 1;
  const std::string which = absl::StrCat(one ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
  if (second_signal) {
    return absl::StrCat(which, one ? " was" : " were",
                        " killed with SIGKILL: the launcher got a second signal while stopping it");
  }
  const char* abbrev = sigabbrev_np(stop_signal);
  return absl::StrCat(which, " did not stop within the ", absl::FormatDuration(grace_period),
                      " grace period after SIG", abbrev ? abbrev : "?", " and ",
                      one ? "was" : "were", " killed with SIGKILL");
}

std::string DescribeOutcome(const RankOutcome& outcome) {
  if (outcome.state == RankState::kSignaled) {
    return absl::StrCat("was killed by signal ", SignalName(outcome.signal));
  }
  return absl::StrCat("exited with code ", outcome.exit_code);
}

// How a rank that reported its own error ended after that report: second to the report, which says
// why it failed. `by_stop`: the signal was the one the launcher sent while stopping the job.
std::string DescribeEndAfterReport(const RankOutcome& outcome, bool by_stop) {
  if (outcome.state != RankState::kSignaled) {
    return absl::StrCat("it then exited with code ", outcome.exit_code);
  }
  if (by_stop) {
    return absl::StrCat("it was still running when the launcher stopped the job: ",
                        SignalName(outcome.signal), " from the launcher ended it");
  }
  return absl::StrCat("it was then killed by signal ", SignalName(outcome.signal));
}

}  // namespace

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  const char* description = sigdescr_np(signal);
  if (abbrev == nullptr) return absl::StrCat("signal ", signal);
  return absl::StrCat("SIG", abbrev, " (", description ? description : "unknown", ")");
}

int SignalThatStoppedLastJob() { return g_stopping_signal; }

int Job::ReceivedStopSignal() { return g_received_signal; }

// SIGKILL for a running rank and its process group, and its end collected.
void Job::KillAndReap(RankOutcome& outcome) {
  if (outcome.state != RankState::kRunning) return;
  kill(-outcome.pid, SIGKILL);
  kill(outcome.pid, SIGKILL);
  if (forkserver_ == nullptr) {
    waitpid(outcome.pid, nullptr, 0);
  } else {  // the server reaps it and says so; a server that does not is killed
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!forkserver_->TakeEnd(outcome.pid).has_value()) {
      if (absl::Now() >= give_up) kill(forkserver_->pid(), SIGKILL);
      absl::SleepFor(kPollInterval);
    }
  }
  outcome.state = RankState::kSignaled;
  outcome.signal = SIGKILL;
  outcome.stopped_by_launcher = true;
}

// How Wait() stops the ranks once something ended the job: a signal to each running rank's process
// group, then SIGKILL after the grace period or at a second SIGINT/SIGTERM to the launcher.
struct Job::Stopping {
  bool started = false;
  bool killed = false;
  int signal = 0;
  int escalations_seen = 0;  // g_received_count when stopping started
  absl::Time kill_at = absl::InfiniteFuture();
  std::string escalation;  // which ranks needed SIGKILL, and why
};

absl::Status Job::Wait() {
  if (!started_) return absl::FailedPreconditionError("the job was not started");
  if (waited_) return absl::FailedPreconditionError("the job was already waited for");
  waited_ = true;
  ForwardedSignals forwarded;
  const absl::Time deadline = absl::Now() + spec_.timeout;
  absl::Status status = absl::OkStatus();
  Stopping stopping;
  while (true) {
    bool any_running = false;
    const std::vector<int> newly_failed =
        stopping.started ? ReapRanks(any_running) : DropLostRanks(ReapRanks(any_running));
    if (spec_.min_ranks > 0 && !stopping.started && failed_rank_ < 0) {
      KillHungRanks();
      if (spec_.max_replacements > 0) TendReplacements();
    }
    if (!stopping.started) {
      // A signal (but SIGPIPE) is more likely the cause than an exit. A rank that exits because a
      // peer was killed can be reaped before that peer, whose threads may still be ending (a killed
      // process is reapable only once all have), so an exit waits kCauseWindow for such a peer
      // before the others are stopped.
      for (int r : newly_failed) {
        if (failed_rank_ < 0) {
          failed_rank_ = r;
          failed_at_ = absl::Now();
        }
        if (EndedBySignalOfItsOwn(outcomes_[r]) &&
            !EndedBySignalOfItsOwn(outcomes_[failed_rank_])) {
          failed_rank_ = r;
        }
      }
      if (failed_rank_ >= 0 && (EndedBySignalOfItsOwn(outcomes_[failed_rank_]) ||
                                absl::Now() >= *failed_at_ + kCauseWindow)) {
        status = absl::AbortedError("");  // the message is written below, with the error text
        NoteRanksWaitedFor(run_dir_, outcomes_, GlobalRank(0), absl::Now(), "when the job failed");
        BeginStopping(stopping, SIGTERM);
      }
    }
    // Ranks lost within the loss window are dropped (or end the job) once it has passed, even when
    // nothing runs any more.
    if (!any_running && lost_.empty()) break;
    PassOnSignal();
    if (!stopping.started && g_received_signal != 0) {
      const int sig = g_received_signal;
      g_stopping_signal = sig;
      status = absl::CancelledError(
          absl::StrCat("the launcher received ", SignalName(sig),
                       " and forwarded it to the workers; ranks still running then: ",
                       absl::StrJoin(RunningRanks(), ", ")));
      BeginStopping(stopping, sig);
    }
    if (!stopping.started && absl::Now() >= deadline) {
      status = absl::DeadlineExceededError(
          absl::StrCat("the job ran past its timeout of ", absl::FormatDuration(spec_.timeout),
                       "; ranks still running then: ", absl::StrJoin(RunningRanks(), ", "),
                       " (stopped with SIGTERM)", LastCalls()));
      BeginStopping(stopping, SIGTERM);
    }
    MaybeEscalate(stopping);
    absl::SleepFor(kPollInterval);
  }
  EndWhatRanksLeft();
  CollectReports();
  RemoveRunDir();
  return WaitResult(std::move(status), stopping.escalation);
}

// Reaps the ranks that ended since the last poll; returns those that failed (a signal or a non-zero
// exit) and says whether any still runs.
std::vector<int> Job::ReapRanks(bool& any_running) {
  std::vector<int> newly_failed;
  for (int r = 0; r < spec_.nprocs; ++r) {
    RankOutcome& outcome = outcomes_[r];
    if (outcome.state != RankState::kRunning) continue;
    int raw = 0;
    pid_t got = 0;
    if (forkserver_ != nullptr) {
      if (std::optional<ForkedRankEnd> end = forkserver_->TakeEnd(outcome.pid)) {
        got = outcome.pid;
        raw = end->wait_status;
        if (end->server_died) {
          outcome.forkserver_died = true;
          outcome.error_text = absl::StrCat("the forkserver that started the ranks (pid ",
                                            forkserver_->pid(), ") died, and took them with it");
        }
      }
    } else {
      got = waitpid(outcome.pid, &raw, WNOHANG);
    }
    if (got == 0 || (got < 0 && errno == EINTR)) {
      any_running = true;
      continue;
    }
    if (got < 0) {  // not our child any more (someone else reaped it)
      outcome.state = RankState::kExited;
      outcome.exit_code = -1;
      newly_failed.push_back(r);
      continue;
    }
    if (WIFSIGNALED(raw)) {
      outcome.state = RankState::kSignaled;
      outcome.signal = WTERMSIG(raw);
    } else {
      outcome.state = RankState::kExited;
      outcome.exit_code = WEXITSTATUS(raw);
    }
    if (outcome.state == RankState::kSignaled || outcome.exit_code != 0) {
      newly_failed.push_back(r);
    }
  }
  return newly_failed;
}

std::vector<int> Job::DropLostRanks(const std::vector<int>& newly_failed) {
  if (spec_.min_ranks <= 0) return newly_failed;
  if (members_.empty() && membership_changes_ == 0) {
    for (int r = 0; r < spec_.nprocs; ++r) members_.push_back(r);
  }
  std::vector<int> failures;
  for (int r : newly_failed) {
    if (ForgetFailedReplacement(r)) continue;
    if (outcomes_[r].forkserver_died || ReadWorkerError(run_dir_, GlobalRank(r)).has_value()) {
      // It said why (the others would fail the same way), or every rank is gone.
      failures.push_back(r);
    } else {
      if (lost_.empty()) lost_since_ = absl::Now();
      lost_.push_back(r);
    }
  }
  if (!failures.empty() || lost_.empty() || absl::Now() < lost_since_ + kLossWindow) {
    return failures;
  }
  std::vector<int> survivors;  // this node's, by local index
  for (int r : members_) {
    if (absl::c_find(lost_, r) == lost_.end()) survivors.push_back(r);
  }
  MembershipChange change;
  for (int r : survivors) change.ranks.push_back(GlobalRank(r));
  std::string ends;
  for (int r : lost_) {
    change.left.push_back(GlobalRank(r));
    const RankOutcome& outcome = outcomes_[r];
    // A hung rank the launcher killed: why it did.
    const std::string end = outcome.error_text.empty()
                                ? absl::StrCat("rank ", GlobalRank(r), " (pid ", outcome.pid, ") ",
                                               DescribeOutcome(outcome))
                                : absl::StrCat(outcome.error_text, "; the launcher killed it");
    absl::StrAppend(&change.why, end, "\n");
    absl::StrAppend(&ends, ends.empty() ? "" : "; ", end);
  }
  if (static_cast<int>(change.ranks.size()) < spec_.min_ranks) {
    // The job ends: the first rank lost is its failure, and the message names every loss and where
    // the survivors wrote their last commit.
    absl::StrAppend(&dropped_, dropped_.empty() ? "" : "; ", ends);
    EndBelowMinRanks(change);
    std::vector<int> lost;
    lost.swap(lost_);
    return lost;
  }
  // Every earlier change's group is superseded, and one may still be forming, its ranks waiting for
  // the lost one: they stop at this word and take the new change.
  AbandonFormingGroups();
  change.number = ++membership_changes_;
  change.latest_loss = change.number;
  latest_loss_change_ = change.number;
  if (absl::Status published = PublishMembershipChange(run_dir_, change); !published.ok()) {
    std::fprintf(stderr, "ddpspawn: cannot tell the ranks who goes on: %s\n",
                 std::string(published.message()).c_str());
    std::vector<int> lost;
    lost.swap(lost_);
    return lost;
  }
  std::fprintf(stderr, "ddpspawn: lost %s; %zu of %d ranks go on (min_ranks %d)\n", ends.c_str(),
               change.ranks.size(), spec_.nprocs, spec_.min_ranks);
  absl::StrAppend(&dropped_, dropped_.empty() ? "" : "; ", ends);
  members_ = std::move(survivors);
  if (spec_.max_replacements > 0) to_replace_.insert(to_replace_.end(), lost_.begin(), lost_.end());
  lost_.clear();
  return failures;
}

void Job::KillHungRanks() {
  std::vector<int> asking;
  for (int r : members_) asking.push_back(GlobalRank(r));
  if (!TakeRecoveryRequests(run_dir_, asking)) return;
  std::vector<bool> noted_before(outcomes_.size());
  for (size_t r = 0; r < outcomes_.size(); ++r) noted_before[r] = !outcomes_[r].error_text.empty();
  const std::vector<bool> in_own_code = NoteRanksWaitedFor(
      run_dir_, outcomes_, GlobalRank(0), absl::Now(), "when the others' collective timed out");
  for (int r : members_) {
    RankOutcome& outcome = outcomes_[r];
    if (outcome.state != RankState::kRunning || noted_before[r] || outcome.error_text.empty()) {
      continue;  // not waited for, or killed already (and maybe not yet reaped)
    }
    // A stopped process, or one running its own code while the others waited in a collective for
    // their whole timeout. Not a rank behind but inside a call: it may be one that a lost rank held
    // up, still on its way out of its collective.
    if (ReadProcessState(outcome.pid) != ProcessState::kStopped && !in_own_code[r]) {
      outcome.error_text.clear();
      continue;
    }
    kill(-outcome.pid, SIGKILL);
    kill(outcome.pid, SIGKILL);
  }
}

void Job::SignalRunning(int sig) {
  for (RankOutcome& outcome : outcomes_) {
    if (outcome.state != RankState::kRunning) continue;
    if (kill(-outcome.pid, sig) != 0) kill(outcome.pid, sig);
    outcome.stopped_by_launcher = true;
  }
}

std::vector<int> Job::RunningRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < spec_.nprocs; ++r) {
    if (outcomes_[r].state == RankState::kRunning) ranks.push_back(GlobalRank(r));
  }
  return ranks;
}

// A signal the launcher passes on (SIGUSR1/SIGUSR2) goes to the ranks themselves, not their process
// groups (whose other processes may not handle it).
void Job::PassOnSignal() {
  const int sig = g_passed_on_signal;
  if (sig == 0) return;
  g_passed_on_signal = 0;
  for (const RankOutcome& outcome : outcomes_) {
    if (outcome.state == RankState::kRunning) kill(outcome.pid, sig);
  }
}

void Job::BeginStopping(Stopping& stopping, int sig) {
  stopping.started = true;
  stopping.signal = sig;
  stopping.escalations_seen = g_received_count;
  SignalRunning(sig);
  // A stopped rank (SIGSTOP, a terminal's ^Z) acts on nothing but SIGKILL until it is continued.
  // Continuing every rank after the stop signal, as systemd does, ends a stopped one now rather
  // than at the grace period.
  SignalRunning(SIGCONT);
  stopping.kill_at = absl::Now() + spec_.grace_period;
}

// A second SIGINT/SIGTERM while stopping, or the grace period's end: SIGKILL.
void Job::MaybeEscalate(Stopping& stopping) {
  if (!stopping.started || stopping.killed) return;
  const bool again = g_received_count > stopping.escalations_seen;
  if (absl::Now() < stopping.kill_at && !again) return;
  stopping.escalation =
      DescribeEscalation(RunningRanks(), again, stopping.signal, spec_.grace_period);
  SignalRunning(SIGKILL);
  stopping.killed = true;
}

// SIGKILL for whatever is left in the reaped ranks' process groups, then a bounded wait until the
// groups are gone (their orphans are reaped by init; a container whose init does not reap leaves
// zombies, which hold nothing).
void Job::EndWhatRanksLeft() const {
  std::vector<pid_t> groups;
  for (const RankOutcome& outcome : outcomes_) {
    if (outcome.pid > 0 && kill(-outcome.pid, SIGKILL) == 0) groups.push_back(outcome.pid);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(1);
  while (!groups.empty() && absl::Now() < give_up) {
    groups.erase(std::remove_if(groups.begin(), groups.end(),
                                [](pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }),
                 groups.end());
    if (!groups.empty()) absl::SleepFor(absl::Milliseconds(2));
  }
}

// The job's status once every rank ended: the failed rank's, headed by the error it reported (then
// how its process ended), else by how it ended; or `status` (OK, cancelled, or past the timeout),
// with the escalation.
absl::Status Job::WaitResult(absl::Status status, const std::string& escalation) const {
  if (failed_rank_ >= 0 && !dropped_.empty()) {
    // Elastic: every rank the job lost, in order, after the failure that ended it.
    absl::Status ended = WaitResultOfFailure(escalation);
    return absl::Status(ended.code(),
                        absl::StrCat(ended.message(), "\n(min_ranks ", spec_.min_ranks,
                                     ": the job lost, in order: ", dropped_, ")",
                                     last_commit_.empty() ? "" : "\n", last_commit_));
  }
  if (failed_rank_ >= 0) return WaitResultOfFailure(escalation);
  if (!status.ok() && !escalation.empty()) {
    return absl::Status(status.code(), absl::StrCat(status.message(), "; ", escalation));
  }
  return status;
}

absl::Status Job::WaitResultOfFailure(const std::string& escalation) const {
  const RankOutcome& failed = outcomes_[failed_rank_];
  std::string message = absl::StrCat("rank ", GlobalRank(failed_rank_), " (pid ", failed.pid, ") ");
  if (failed.reported) {
    // The ranks it waited for and that never came (the launcher's notes on them) come first.
    std::string absent;
    for (int r = 0; r < spec_.nprocs; ++r) {
      const RankOutcome& other = outcomes_[r];
      if (r != failed_rank_ && !other.reported && !other.error_text.empty()) {
        absl::StrAppend(&absent, other.error_text, "\n");
      }
    }
    message = absl::StrCat(absent, absent.empty() ? "" : "then ", message);
    absl::StrAppend(&message, "failed: ", absl::StripTrailingAsciiWhitespace(failed.error_text),
                    "\n(", DescribeEndAfterReport(failed, failed_rank_ended_by_stop_));
    if (!escalation.empty()) absl::StrAppend(&message, "; ", escalation);
    absl::StrAppend(&message, ")");
    return absl::AbortedError(message);
  }
  absl::StrAppend(&message, DescribeOutcome(failed));
  if (!escalation.empty()) absl::StrAppend(&message, "; ", escalation);
  if (!failed.error_text.empty()) {
    // A note of the launcher's (not the rank's report): what ended the rank from outside (its
    // forkserver's death), which is the job's cause, and so comes first.
    return absl::AbortedError(absl::StrCat(failed.error_text, ": ", message, " first"));
  }
  return absl::AbortedError(message);
}

void Job::CollectReports() {
  for (int r = 0; r < spec_.nprocs; ++r) {
    if (std::optional<std::string> text = ReadWorkerError(run_dir_, GlobalRank(r))) {
      outcomes_[r].error_text = std::move(*text);
      outcomes_[r].reported = !outcomes_[r].error_text.empty();
    }
    outcomes_[r].progress = ReadWorkerProgress(run_dir_, GlobalRank(r)).value_or(-1);
  }
  result_ = ReadWorkerResult(run_dir_);
  AttributeToFirstReport();
}

// A rank that fails because a peer exited can be reaped first: the peer's exit may still be under
// way (its threads ending, a sanitizer's checks) when the rank saw it gone. A peer reports before
// it exits, so a failed rank that reported before the one chosen is the cause. Not applied when the
// one chosen was killed by a signal other than SIGPIPE (the likelier cause, and one that cannot
// report) or did not report (then nothing orders it against the others). The stop began after the
// chosen rank was reaped, so after its report: an earlier report was not a rank answering the
// launcher's stop.
void Job::AttributeToFirstReport() {
  if (failed_rank_ < 0 || EndedBySignalOfItsOwn(outcomes_[failed_rank_])) return;
  const std::vector<int> order = ReadFailureReportOrder(run_dir_);
  if (absl::c_find(order, GlobalRank(failed_rank_)) == order.end()) return;
  for (const int global : order) {
    const int r = global - GlobalRank(0);
    if (r == failed_rank_) return;
    if (r < 0 || r >= spec_.nprocs) continue;
    RankOutcome& outcome = outcomes_[r];
    const bool failed = outcome.state == RankState::kSignaled ||
                        (outcome.state == RankState::kExited && outcome.exit_code != 0);
    if (failed) {
      failed_rank_ = r;
      // Still running at the stop (its exit was slow), the stop's signal ended it.
      failed_rank_ended_by_stop_ =
          outcome.state == RankState::kSignaled && outcome.stopped_by_launcher;
      outcome.stopped_by_launcher = false;  // it failed first; the stop came after
      return;
    }
  }
}

std::string Job::LastCalls() const {
  const std::string calls = DescribeNewestGroup(run_dir_, spec_.nprocs, absl::Now());
  return calls.empty() ? ""
                       : absl::StrCat("\nwhat every rank was last doing (flight recorder):", calls);
}

void Job::RemoveRunDir() {
  if (run_dir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(run_dir_, ignored);
  // The workers' shared-memory segments, should a rank have died before removing its own.
  const std::string prefix = SharedMemoryPrefix(run_dir_);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ignored)) {
    if (absl::StartsWith(entry.path().filename().string(), prefix)) {
      std::filesystem::remove(entry.path(), ignored);
    }
  }
  run_dir_.clear();
  run_dir_guard_.Stop();
}

}  // namespace ddpspawn
