// Elastic fit (see elastic_fit.h).
#include "core/train/run/elastic_fit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/launch/membership.h"
#include "core/launch/worker_channel.h"
#include "core/train/loop/checkpoint_connector.h"
#include "core/train/loop/in_memory_commit.h"
#include "core/train/loop/trainer.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// How long a rank whose fit failed waits for the launcher to drop a rank: the launcher sees a death
// within milliseconds; a failure that no death explains ends the job this much later.
constexpr absl::Duration kMembershipPatience = absl::Seconds(3);

// A failure a lost peer can cause: a collective's (a transport error, a timeout). An invalid input,
// a non-finite loss, a refused option fail every rank alike and end the job at once.
bool MayBeALostPeer(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

// Joins the group of `change`'s ranks (the job's change.number-th group) and sets `commit` to
// resume from their new rank 0's commit (unchanged when rank 0 has none yet: the fit then starts as
// it first did). Returns the commit's step, -1 without one.
absl::StatusOr<int64_t> JoinGroupOfChange(DDPSpawnStrategy& strategy, const ClusterInfo& launched,
                                          const MembershipChange& change,
                                          const std::shared_ptr<LightningModule>& module,
                                          InMemoryCommit& commit) {
  const auto me = std::find(change.ranks.begin(), change.ranks.end(), launched.rank);
  if (me == change.ranks.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the launcher dropped rank ", launched.rank, " from the job"));
  }
  ClusterInfo cluster = launched;
  cluster.rank = static_cast<int>(me - change.ranks.begin());
  cluster.world_size = static_cast<int>(change.ranks.size());
  cluster.local_rank = cluster.rank;
  cluster.local_world_size = cluster.world_size;
  RETURN_IF_ERROR(strategy.Rejoin(cluster, change.number));
  SetWorkerGroupRank(cluster.rank);
  (void)ConfirmFormed(launched.run_dir, launched.rank, change.number);
  // A backward cut short leaves partial gradients; the commit holds none.
  for (at::Tensor& parameter : module->parameters()) parameter.mutable_grad() = at::Tensor();
  // New rank 0's commit step: every rank resumes from that commit (RestoreCommit), the ranks that
  // hold it from their own copy, the others from rank 0's.
  ASSIGN_OR_RETURN(std::string taken, strategy.Broadcast(absl::StrCat(commit.step), 0));
  int64_t step = -1;
  if (!absl::SimpleAtoi(taken, &step)) {
    return absl::InternalError("the new rank 0's commit step arrived garbled");
  }
  if (step < 0) return step;
  commit.step = step;
  commit.resume = true;
  return step;
}

// After each commit, on every rank: whether the launcher admitted a replacement since the change
// `seen` (rank 0's reading, broadcast, so that every rank decides alike). A change after an
// unconsumed loss is left to the failure that loss brings.
absl::StatusOr<std::optional<MembershipChange>> AdmittedSince(DDPSpawnStrategy& strategy,
                                                              const std::string& run_dir,
                                                              int seen) {
  std::string mine;
  if (strategy.is_global_zero()) {
    absl::StatusOr<std::optional<MembershipChange>> latest = ReadMembershipChange(run_dir);
    if (latest.ok() && latest->has_value() && (*latest)->number > seen &&
        (*latest)->latest_loss <= seen) {
      mine = EncodeMembershipChange(**latest);
    }
  }
  ASSIGN_OR_RETURN(std::string agreed, strategy.Broadcast(mine, 0));
  if (agreed.empty()) return std::optional<MembershipChange>();
  ASSIGN_OR_RETURN(MembershipChange change, DecodeMembershipChange(agreed));
  return std::optional<MembershipChange>(std::move(change));
}

// A replacement rank: asks to join, then waits until the launcher admits it; the change that does.
absl::StatusOr<MembershipChange> AwaitAdmission(const ClusterInfo& launched) {
  RETURN_IF_ERROR(RequestToJoin(launched.run_dir, launched.rank));
  int read = 0;
  while (true) {
    std::optional<MembershipChange> change =
        AwaitMembershipChange(launched.run_dir, read, absl::InfiniteDuration());
    if (!change.has_value()) return absl::UnavailableError("the launcher is gone");
    if (absl::c_find(change->ranks, launched.rank) != change->ranks.end()) return *change;
    read = change->number;
  }
}

// Below min_ranks (`change` ends the job): the first survivor writes its last commit beside the
// fit's last.ckpt (which an epoch's end may have written later than the commit) and tells the
// launcher where.
void WriteLastCommitIfFirst(const ClusterInfo& launched, const MembershipChange& change,
                            const InMemoryCommit& commit, LightningModule& module,
                            const TrainerOptions& options) {
  if (change.ranks.front() != launched.rank) return;
  const std::string path = std::filesystem::absolute(LastCheckpointPath(options))
                               .replace_filename("last_commit.ckpt")
                               .string();
  (void)ReportLastCommit(launched.run_dir, SaveLastCommit(commit, module, path, launched.rank));
}

// The result's keys for a change the ranks went on from, from the group of `before` (the ranks as
// launched, in their order; a change may take in several of the launcher's at once, when a loss and
// an admission came together): who left and who joined since, `resumed` (the commit's step, -1 for
// none) and `rerun` (the steps done since then that were lost); and rank 0's line about it.
void NoteChange(const DDPSpawnStrategy& strategy, const std::vector<int>& before,
                const MembershipChange& change, int64_t resumed, int64_t rerun, std::string& keys) {
  std::vector<int> left, joined;
  for (int r : before) {
    if (absl::c_find(change.ranks, r) == change.ranks.end()) left.push_back(r);
  }
  for (int r : change.ranks) {
    if (absl::c_find(before, r) == before.end()) joined.push_back(r);
  }
  // A rank lost and started again is both.
  for (int r : change.joined) {
    if (absl::c_find(joined, r) == joined.end()) {
      joined.push_back(r);
      left.push_back(r);
    }
  }
  const std::string key = absl::StrCat("elastic.change", change.number, ".");
  absl::StrAppend(
      &keys, key, "left=", absl::StrJoin(left, ","), "\n", key,
      "joined=", absl::StrJoin(joined, ","), "\n", key, "world_size=", change.ranks.size(), "\n",
      key, "resumed_step=", std::max<int64_t>(resumed, 0), "\n", key, "steps_rerun=", rerun, "\n");
  if (!strategy.is_global_zero()) return;
  const std::string who =
      joined.empty() ? ""
                     : absl::StrCat(" with rank ", absl::StrJoin(joined, ","), " started again");
  std::fprintf(stderr,
               "ddpspawn: elastic change %d: %zu ranks%s go on from the in-memory commit of step "
               "%lld (%lld steps re-run)\n",
               change.number, change.ranks.size(), who.c_str(),
               static_cast<long long>(std::max<int64_t>(resumed, 0)),
               static_cast<long long>(rerun));
}

}  // namespace

absl::StatusOr<ElasticFitResult> ElasticFit(DDPSpawnStrategy& strategy, TrainerOptions options,
                                            int64_t commit_every_n_steps,
                                            const std::shared_ptr<LightningModule>& module,
                                            const Dataset& train, const Dataset* validation) {
  const ClusterInfo launched = strategy.cluster();
  std::vector<int> ranks_now;  // the group's ranks as launched, in order (none for a replacement)
  if (!strategy.awaits_elastic_join()) {
    for (int r = 0; r < launched.world_size; ++r) ranks_now.push_back(r);
  }
  auto commit = std::make_shared<InMemoryCommit>();
  commit->every_n_steps = std::max<int64_t>(commit_every_n_steps, 1);
  ElasticFitResult result;
  int changes_seen = 0;
  // The change that admits a replacement, taken at a commit: it ends the fit to re-form the group.
  std::optional<MembershipChange> admitted;
  commit->after_commit = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(admitted, AdmittedSince(strategy, launched.run_dir, changes_seen));
    if (!admitted.has_value()) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("membership change ", admitted->number, " admits rank ",
                                           absl::StrJoin(admitted->joined, ",")));
  };
  options.in_memory_commit = commit;
  // A replacement waits until the launcher admits it and the others take it in at a commit.
  std::optional<MembershipChange> next;
  if (strategy.awaits_elastic_join()) {
    ASSIGN_OR_RETURN(next, AwaitAdmission(launched));
  }
  while (true) {
    absl::Status failure = absl::OkStatus();
    if (!next.has_value()) {
      admitted.reset();
      absl::StatusOr<FitResult> fitted = Trainer(strategy, options).Fit(module, train, validation);
      if (fitted.ok()) {
        result.fit = *std::move(fitted);
        result.keys = absl::StrCat("elastic.world_size=", strategy.world_size(),
                                   "\nelastic.changes=", changes_seen, "\n", result.keys);
        return result;
      }
      failure = fitted.status();
      if (admitted.has_value()) {
        next.swap(admitted);
      } else if (!MayBeALostPeer(failure)) {
        return failure;
      } else if (absl::IsDeadlineExceeded(failure)) {
        // A stopped peer, the launcher looks for when asked after a timeout; a lost one, it saw.
        (void)RequestRecovery(launched.run_dir, launched.rank);
      }
    }
    // The group of the next change may itself fail to form (a rank lost meanwhile): the next one.
    while (true) {
      if (!next.has_value()) {
        next = AwaitMembershipChange(launched.run_dir, changes_seen, kMembershipPatience,
                                     AwaitedChange::kAfterALoss);
        if (!next.has_value()) return failure;
      }
      const MembershipChange change = *next;
      next.reset();
      changes_seen = change.number;
      if (change.ends_job) {
        WriteLastCommitIfFirst(launched, change, *commit, *module, options);
        return failure;
      }
      const int64_t reached = commit->reached_step;
      absl::StatusOr<int64_t> resumed =
          JoinGroupOfChange(strategy, launched, change, module, *commit);
      if (!resumed.ok()) {
        failure = resumed.status();
        continue;
      }
      if (absl::c_find(change.joined, launched.rank) != change.joined.end()) {
        (void)ConfirmJoined(launched.run_dir, launched.rank);
      }
      const int64_t rerun = *resumed >= 0 ? std::max<int64_t>(reached - *resumed, 0) : reached;
      NoteChange(strategy, ranks_now, change, *resumed, rerun, result.keys);
      ranks_now = change.ranks;
      break;
    }
  }
}

}  // namespace ddpspawn
