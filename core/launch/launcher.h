// The launcher: starts N worker processes (spawn: fork+exec of a program; fork: a callback in a
// forked child; forkserver: forked by a server that is itself an exec of the program, see
// forkserver.h), gives each the torchrun-compatible environment and a private rendezvous, and joins
// them. The first failing rank stops the others (SIGTERM, a grace period, SIGKILL); the failure
// names the rank and its cause. Workers die with the launcher (PR_SET_PDEATHSIG), and so do the
// processes they forked (RunDirGuard kills each worker's process group).
//
// SIGUSR1 and SIGUSR2 that the launcher receives while it waits are passed on to the ranks (SLURM's
// warning before it ends a job reaches the training).
//
// What a worker inherits: the launcher's whole environment (plus the contract's variables and
// LaunchSpec::env), and descriptors 0, 1 and 2. A spawned rank gets no other descriptor; a forked
// one keeps every descriptor of the launcher unless LaunchSpec::fork_close_descriptors says
// otherwise.
#ifndef DDPSPAWN_CORE_LAUNCH_LAUNCHER_H_
#define DDPSPAWN_CORE_LAUNCH_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/launch/run_dir_guard.h"
#include "core/util/option_defaults.h"

namespace ddpspawn {

struct MembershipChange;  // membership.h

enum class StartMethod { kSpawn, kFork, kForkserver };

// "spawn", "fork" or "forkserver"; InvalidArgument otherwise.
absl::StatusOr<StartMethod> ParseStartMethod(absl::string_view name);
absl::string_view StartMethodName(StartMethod method);

struct ForkHooks {
  std::function<void()> before_fork;        // in the parent, before each fork
  std::function<void()> after_fork_parent;  // in the parent, after each fork
  std::function<void()> after_fork_child;   // in the child, first thing
};

// The most ranks one launcher starts (and so the most --nproc-per-node): far more than one machine
// runs usefully, small enough that rank arithmetic in int never overflows.
inline constexpr int kMaxNprocs = 65536;

struct LaunchSpec {
  int nprocs = 1;  // in [1, kMaxNprocs]
  StartMethod start_method = StartMethod::kSpawn;
  std::vector<std::string> argv;        // spawn, forkserver: program and arguments
  std::vector<std::string> env;         // extra NAME=value for every rank
  std::function<int(int rank)> worker;  // fork: returns the exit code
  ForkHooks fork_hooks;
  // fork: run the worker on a thread of its own in the child, which the forking thread waits for.
  // GNU OpenMP (LibTorch's CPU ops, MKL) keeps a thread's pool with that thread: in a child forked
  // from a thread that ran a parallel region, the pool's threads are gone, and that thread's next
  // region with more than one thread waits for them forever. A new thread starts a pool of its own.
  // Off for a worker that must run on the forking thread (a language runtime's callback, e.g.
  // CPython's, whose lock that thread holds).
  bool fork_worker_thread = true;
  // fork: close every descriptor above 2 in the child before the worker runs, for a worker that
  // opens what it uses itself (the training runs'). Off by default: a forked worker is a copy of
  // its caller and may use the files and sockets the caller opened; closing them under it would
  // fail its writes, or send them to whatever file reuses the number.
  bool fork_close_descriptors = false;
  absl::Duration timeout = absl::InfiniteDuration();
  absl::Duration grace_period = absl::Seconds(DDPSPAWN_DEFAULT_GRACE_PERIOD_S);
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port
  // A job of several nodes (one launcher each): this launcher starts ranks node_rank * nprocs ...
  // node_rank * nprocs + nprocs - 1 of nnodes * nprocs, which get those global RANKs, and messages
  // name them so. Its ranks find each other at master_addr:master_port, which someone must serve.
  int nnodes = 1;
  int node_rank = 0;
  // Elastic (one node): a rank that ends without having reported an error (killed by a signal,
  // crashed, or an exit that left no report) is dropped rather than ending the job, while at least
  // min_ranks ranks go on. The launcher names it on stderr and tells the others which ranks go on
  // (membership.h; ranks lost within 50 ms of each other leave together), and they form a new group
  // among themselves. Below min_ranks the job fails naming every rank it lost. A reported error
  // still ends the job: it would recur. 0: any failing rank ends the job.
  int min_ranks = 0;
  // Elastic, with min_ranks: each rank the job drops is started again (with
  // DDPSPAWN_ELASTIC_JOIN=1), up to this many times in all; once ready it asks to join, the
  // launcher admits it with a change that puts it last among the ranks, and the running ranks take
  // it in at their next commit (replacements.cc). A replacement still waiting when the others
  // finish is stopped; one that fails before it was admitted is named and the job goes on without
  // it.
  int max_replacements = 0;
};

enum class RankState { kNotStarted, kRunning, kExited, kSignaled };

struct RankOutcome {
  RankState state = RankState::kNotStarted;
  int exit_code = 0;
  int signal = 0;
  pid_t pid = -1;
  bool stopped_by_launcher = false;
  std::string error_text;  // what the rank reported, if anything
  // error_text is the rank's own report (SetWorkerError: its exception, its traceback), not a note
  // of the launcher's.
  bool reported = false;
  // How far it got, as it last said (SetWorkerProgress: fit's global step); -1: it said nothing.
  int64_t progress = -1;
  // The forkserver that started it died, and took it along: not a loss an elastic job survives
  // (every rank of the server went with it).
  bool forkserver_died = false;
};

class Forkserver;

// A job: launched once, joined once. Not thread-safe; one thread drives it. Ownership: it owns its
// ranks (its destructor kills and reaps those still running), its run directory and that
// directory's guardian; the forkserver it forks through is shared with later jobs of the same
// thread and program.
class Job {
 public:
  // Validates the spec; nothing starts yet.
  static absl::StatusOr<std::unique_ptr<Job>> Create(LaunchSpec spec);

  // Starts the forkserver that a job of `spec` (start method forkserver) would use, so that its
  // launch finds it ready: the launch then costs about what fork's does. Every later job with the
  // same program, arguments and extra environment reuses it. A no-op for the other start methods.
  static absl::Status PrestartForkserver(const LaunchSpec& spec);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  // Kills (SIGKILL) and reaps any rank still running, removes the run directory.
  ~Job();

  // Starts every rank. In fork mode the children never return from here.
  absl::Status Start();

  // Joins every rank (see the file comment). Ok when every rank exited 0; else Aborted (a rank
  // failed: failed_rank() says which), DeadlineExceeded (timeout) or Cancelled (the launcher got
  // SIGINT/SIGTERM), with a message that names the rank and cause. Once the ranks are reaped, what
  // is left in their process groups (a child a rank forked and left exiting, as a sanitizer's leak
  // checker may) is killed and waited for, up to a second, so that no process of the job (nor the
  // memory it holds) outlives Wait().
  absl::Status Wait();

  int nprocs() const { return spec_.nprocs; }
  // One per rank this launcher started, in order (the global rank of outcomes()[i] is
  // GlobalRank(i)).
  const std::vector<RankOutcome>& outcomes() const { return outcomes_; }
  // The index in outcomes() of the rank whose failure ended the job; -1: none.
  int failed_rank() const { return failed_rank_; }
  int GlobalRank(int index) const { return spec_.node_rank * spec_.nprocs + index; }
  // When the launcher saw that rank fail; nullopt when none failed.
  std::optional<absl::Time> failed_at() const { return failed_at_; }
  // Rank 0's result, if it set one.
  const std::optional<std::string>& result() const { return result_; }

 private:
  explicit Job(LaunchSpec spec);
  absl::Status StartRank(int rank, const std::vector<std::string>& env);
  std::vector<std::string> RankEnvironment(int rank) const;
  // What every rank's environment has in common: the launcher's, the spec's and the thread counts
  // (the forkserver runs with it).
  std::vector<std::string> CommonEnvironment() const;
  void KillAndReap(RankOutcome& outcome);
  // Wait() in steps (launcher.cc).
  struct Stopping;
  std::vector<int> ReapRanks(bool& any_running);
  // Elastic: keeps the ranks in `newly_failed` that ended without a report aside, and once none has
  // ended for a moment drops them (publishing the change) while min_ranks go on; returns the
  // failures that end the job (all of them otherwise).
  std::vector<int> DropLostRanks(const std::vector<int>& newly_failed);
  // Elastic (below_min_ranks.cc): marks every group formed so far abandoned, so that ranks waiting
  // in one that is forming stop; and, once fewer than min_ranks are left, publishes `change` (the
  // survivors) as the one that ends the job and waits for the first survivor to write the last
  // commit, noting in last_commit_ where it did. A SIGINT or SIGTERM to the launcher ends the wait
  // (SIGUSR1 and SIGUSR2 are passed on meanwhile).
  void AbandonFormingGroups() const;
  void EndBelowMinRanks(const MembershipChange& survivors);
  // Elastic: when a rank asked for it (its collective failed), kills the ranks the others wait for
  // (stopped, or behind in the newest group's calls while outside any collective, running their own
  // code), which DropLostRanks() then drops.
  void KillHungRanks();
  // Elastic with max_replacements (replacements.cc): starts a replacement for each rank dropped
  // since the last call while the budget lasts, admits the replacements that asked to join, and
  // stops those still waiting once the others have finished.
  void TendReplacements();
  // Whether every member said it formed the group of the latest membership change.
  bool MembersFormedLatestGroup() const;
  // Whether rank `r` (an index into outcomes_) is a replacement not yet admitted; if it is, its
  // failure is named and forgotten.
  bool ForgetFailedReplacement(int r);
  void SignalRunning(int sig);
  std::vector<int> RunningRanks() const;
  void PassOnSignal();
  // The SIGINT or SIGTERM the launcher received while waiting; 0: none.
  static int ReceivedStopSignal();
  void BeginStopping(Stopping& stopping, int sig);
  void MaybeEscalate(Stopping& stopping);
  void EndWhatRanksLeft() const;
  absl::Status WaitResult(absl::Status status, const std::string& escalation) const;
  // WaitResult() when failed_rank_ ended the job.
  absl::Status WaitResultOfFailure(const std::string& escalation) const;
  void CollectReports();
  void AttributeToFirstReport();
  // The ranks' flight records of their newest group, as text for an error; empty when none recorded
  // anything.
  std::string LastCalls() const;
  void RemoveRunDir();

  LaunchSpec spec_;
  std::string program_path_;                // spawn, forkserver: argv[0] resolved on PATH
  std::shared_ptr<Forkserver> forkserver_;  // forkserver: the server forking the ranks
  std::string run_dir_;
  std::vector<RankOutcome> outcomes_;
  int failed_rank_ = -1;
  // The failed rank, named for its earlier report, was still running when the launcher stopped the
  // job, and the launcher's signal ended it.
  bool failed_rank_ended_by_stop_ = false;
  std::optional<absl::Time> failed_at_;
  bool started_ = false;
  bool waited_ = false;
  std::optional<std::string> result_;
  // Elastic (spec_.min_ranks): the ranks (indices into outcomes_) still in the job, those lost and
  // not yet dropped (since lost_since_), the changes published, and each dropped rank's end.
  std::vector<int> members_;
  std::vector<int> lost_;
  absl::Time lost_since_ = absl::InfiniteFuture();
  int membership_changes_ = 0;
  int latest_loss_change_ = 0;  // the number of the newest change that dropped a rank
  std::string dropped_;
  std::string last_commit_;  // below min_ranks: the survivor's line on the last commit
  // Elastic with max_replacements: the ranks dropped and not yet started again, the replacements
  // started, and those that have not yet said they joined the others' group.
  std::vector<int> to_replace_;
  int replacements_started_ = 0;
  std::vector<int> joining_;
  // Removes the run directory and shared memory should this process die without RemoveRunDir().
  RunDirGuard run_dir_guard_;
};

// "SIGSEGV (Segmentation fault)".
std::string SignalName(int signal);

// The signal (SIGINT or SIGTERM) that made the latest Job::Wait() in this process stop its ranks,
// ending it Cancelled; 0 when none did. A program can end the way that signal asks once it has
// cleaned up (tools/cli does).
int SignalThatStoppedLastJob();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_LAUNCHER_H_
