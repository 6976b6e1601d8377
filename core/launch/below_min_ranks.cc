// An elastic job that lost more ranks than min_ranks allows (Job::DropLostRanks): before it fails,
// its survivors are told so by a membership change that ends the job, and the first of them writes
// the last in-memory commit to disk (core/train/run/elastic_fit.cc), which `--resume-from`
// continues; the job's error says where, or why not. Members of Job (launcher.h).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/env/run_dir.h"
#include "core/launch/launcher.h"
#include "core/launch/membership.h"
#include "core/util/files.h"
#include "core/util/process_state.h"

namespace ddpspawn {
namespace {

// How long the launcher waits for the survivor to write the last commit while it runs.
constexpr absl::Duration kLastCommitPatience = absl::Seconds(60);

}  // namespace

void Job::AbandonFormingGroups() const {
  for (int generation = 0; generation <= membership_changes_; ++generation) {
    (void)WriteFileAtomically(AbandonedStoreMarker(RunDirStoreFile(run_dir_, generation)), "",
                              /*durable=*/false);
  }
}

void Job::EndBelowMinRanks(const MembershipChange& survivors) {
  if (survivors.ranks.empty()) return;  // nobody holds a commit
  MembershipChange change = survivors;
  AbandonFormingGroups();
  change.ends_job = true;
  change.number = ++membership_changes_;
  change.latest_loss = change.number;
  latest_loss_change_ = change.number;
  if (absl::Status published = PublishMembershipChange(run_dir_, change); !published.ok()) {
    last_commit_ =
        absl::StrCat("the survivors were not told to write the last commit: ", published.message());
    return;
  }
  int writer = -1;
  for (int r : members_) {
    if (GlobalRank(r) == change.ranks.front()) writer = r;
  }
  const absl::Time give_up = absl::Now() + kLastCommitPatience;
  bool ended = writer < 0;
  int interrupted = 0;
  while (!ended && absl::Now() < give_up) {
    if (std::optional<std::string> line = ReadLastCommitReport(run_dir_)) {
      last_commit_ = *std::move(line);
      return;
    }
    PassOnSignal();
    if ((interrupted = ReceivedStopSignal()) != 0) break;
    // (A forkserver's rank is not the launcher's child: the kernel's word, not waitid.)
    ended = HasExited(ReadProcessState(outcomes_[writer].pid));
    if (!ended) absl::SleepFor(absl::Milliseconds(2));
  }
  // It may have written just before it ended.
  std::string why = ended ? "before it ended" : "within 60 s";
  if (interrupted != 0) {
    why = absl::StrCat("before the launcher received ", SignalName(interrupted),
                       ", which ended the wait");
  }
  last_commit_ = ReadLastCommitReport(run_dir_).value_or(
      absl::StrCat("rank ", change.ranks.front(), " did not write the last commit ", why));
}

}  // namespace ddpspawn
