// An elastic job's replacements (LaunchSpec::max_replacements): the launcher starts a dropped rank
// again, admits it when it asks to join (a membership change that puts it last among the ranks; the
// running ranks take it in at their next commit, core/train/run/elastic_fit.h), and stops a
// replacement that is still waiting when the others have finished. Members of Job (launcher.h).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/env/settings.h"
#include "core/launch/launcher.h"
#include "core/launch/membership.h"
#include "core/launch/worker_channel.h"

namespace ddpspawn {

bool Job::ForgetFailedReplacement(int r) {
  if (absl::c_find(joining_, r) == joining_.end() || absl::c_find(members_, r) != members_.end()) {
    return false;
  }
  joining_.erase(absl::c_find(joining_, r));
  const RankOutcome& outcome = outcomes_[r];
  std::string why = ReadWorkerError(run_dir_, GlobalRank(r))
                        .value_or(outcome.state == RankState::kSignaled
                                      ? SignalName(outcome.signal)
                                      : absl::StrCat("exit code ", outcome.exit_code));
  std::fprintf(stderr,
               "ddpspawn: rank %d (pid %d), started again, failed before it joined the others "
               "(%s); %zu ranks go on without it\n",
               GlobalRank(r), static_cast<int>(outcome.pid), why.c_str(), members_.size());
  return true;
}

bool Job::MembersFormedLatestGroup() const {
  return absl::c_all_of(members_, [this](int m) {
    return FormedChange(run_dir_, GlobalRank(m)) >= membership_changes_;
  });
}

void Job::TendReplacements() {
  // Dropped ranks start again while the budget lasts and others still run to take them in.
  const bool members_run =
      absl::c_any_of(members_, [this](int m) { return outcomes_[m].state == RankState::kRunning; });
  if (!members_run) to_replace_.clear();
  for (int r : to_replace_) {
    if (replacements_started_ >= spec_.max_replacements) break;
    ++replacements_started_;
    std::vector<std::string> env = RankEnvironment(r);
    env.push_back(absl::StrCat(SettingName(Setting::kElasticJoin), "=1"));
    outcomes_[r] = RankOutcome();
    if (absl::Status started = StartRank(r, env); !started.ok()) {
      std::fprintf(stderr, "ddpspawn: cannot start rank %d again (%s); %zu ranks go on\n",
                   GlobalRank(r), std::string(started.message()).c_str(), members_.size());
      outcomes_[r].state = RankState::kExited;  // nothing runs in its place
      continue;
    }
    joining_.push_back(r);
    std::fprintf(stderr,
                 "ddpspawn: started rank %d again (pid %d; replacement %d of max_restarts %d); it "
                 "joins the others at their next commit\n",
                 GlobalRank(r), static_cast<int>(outcomes_[r].pid), replacements_started_,
                 spec_.max_replacements);
  }
  to_replace_.clear();
  std::vector<int> waiting;
  for (int r : joining_) {
    if (outcomes_[r].state != RankState::kRunning || TakeJoined(run_dir_, GlobalRank(r))) continue;
    waiting.push_back(r);
    // Admitted once it asks, while no loss is pending (the loss's change comes first), and once
    // every member formed the latest change's group (one still forming an older group when the
    // admission came would wait there while the others formed the admission's).
    if (!lost_.empty() || absl::c_find(members_, r) != members_.end() ||
        !MembersFormedLatestGroup() || !TakeJoinRequest(run_dir_, GlobalRank(r))) {
      continue;
    }
    MembershipChange change;
    change.number = ++membership_changes_;
    for (int m : members_) change.ranks.push_back(GlobalRank(m));
    change.ranks.push_back(GlobalRank(r));
    change.joined.push_back(GlobalRank(r));
    change.latest_loss = latest_loss_change_;
    if (absl::Status published = PublishMembershipChange(run_dir_, change); !published.ok()) {
      std::fprintf(stderr, "ddpspawn: cannot tell the ranks that rank %d joins: %s\n",
                   GlobalRank(r), std::string(published.message()).c_str());
      continue;
    }
    members_.push_back(r);
    std::fprintf(stderr,
                 "ddpspawn: rank %d (pid %d) is ready; %zu of %d ranks go on from the next "
                 "commit\n",
                 GlobalRank(r), static_cast<int>(outcomes_[r].pid), members_.size(), spec_.nprocs);
  }
  joining_ = std::move(waiting);
  if (joining_.empty()) return;
  // The others finished: nobody is left to take a waiting replacement in.
  for (int m : members_) {
    const RankOutcome& outcome = outcomes_[m];
    if (absl::c_find(joining_, m) == joining_.end() &&
        (outcome.state != RankState::kExited || outcome.exit_code != 0)) {
      return;
    }
  }
  for (int r : joining_) {
    std::fprintf(stderr,
                 "ddpspawn: rank %d (pid %d), started again, had not joined when the others "
                 "finished; stopped it\n",
                 GlobalRank(r), static_cast<int>(outcomes_[r].pid));
    KillAndReap(outcomes_[r]);
  }
  joining_.clear();
}

}  // namespace ddpspawn
