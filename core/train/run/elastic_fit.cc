// Elastic fit (see elastic_fit.h).
#include "core/train/run/elastic_fit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/launch/membership.h"
#include "core/launch/worker_channel.h"
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

// Joins the group of `change`'s survivors and takes the commit of their new rank 0 into `commit`
// (to resume from; unchanged when rank 0 has none yet: the fit then starts as it first did).
// Returns the commit's step, -1 without one.
absl::StatusOr<int64_t> JoinSurvivors(DDPSpawnStrategy& strategy, const ClusterInfo& launched,
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
  RETURN_IF_ERROR(strategy.Rejoin(cluster));
  SetWorkerGroupRank(cluster.rank);
  // A backward cut short leaves partial gradients; the commit holds none.
  for (at::Tensor& parameter : module->parameters()) parameter.mutable_grad() = at::Tensor();
  ASSIGN_OR_RETURN(std::string taken,
                   strategy.Broadcast(absl::StrCat(commit.step, ":", commit.bytes), 0));
  const size_t colon = taken.find(':');
  int64_t step = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(taken.substr(0, colon), &step)) {
    return absl::InternalError("the new rank 0's commit arrived garbled");
  }
  if (step < 0) return step;
  commit.bytes = taken.substr(colon + 1);
  commit.step = step;
  commit.resume = true;
  return step;
}

}  // namespace

absl::StatusOr<ElasticFitResult> ElasticFit(DDPSpawnStrategy& strategy, TrainerOptions options,
                                            int64_t commit_every_n_steps,
                                            const std::shared_ptr<LightningModule>& module,
                                            const Dataset& train, const Dataset* validation) {
  const ClusterInfo launched = strategy.cluster();
  auto commit = std::make_shared<InMemoryCommit>();
  commit->every_n_steps = std::max<int64_t>(commit_every_n_steps, 1);
  options.in_memory_commit = commit;
  ElasticFitResult result;
  int changes_seen = 0;
  while (true) {
    absl::StatusOr<FitResult> fitted = Trainer(strategy, options).Fit(module, train, validation);
    if (fitted.ok()) {
      result.fit = *std::move(fitted);
      result.keys = absl::StrCat("elastic.world_size=", strategy.world_size(),
                                 "\nelastic.changes=", changes_seen, "\n", result.keys);
      return result;
    }
    if (!MayBeALostPeer(fitted.status())) return fitted.status();
    // The survivors' group may itself fail to form (another rank lost meanwhile): the next change.
    absl::Status failure = fitted.status();
    // A stopped peer, the launcher looks for when asked after a timeout; a lost one, it saw.
    if (absl::IsDeadlineExceeded(fitted.status())) {
      (void)RequestRecovery(launched.run_dir, launched.rank);
    }
    while (!failure.ok()) {
      std::optional<MembershipChange> change =
          AwaitMembershipChange(launched.run_dir, changes_seen, kMembershipPatience);
      if (!change.has_value()) return failure;
      changes_seen = change->number;
      const int64_t reached = commit->reached_step;
      absl::StatusOr<int64_t> resumed = JoinSurvivors(strategy, launched, *change, module, *commit);
      failure = resumed.status();
      if (!resumed.ok()) continue;
      const int64_t rerun = *resumed >= 0 ? std::max<int64_t>(reached - *resumed, 0) : reached;
      absl::StrAppend(&result.keys, "elastic.change", change->number,
                      ".left=", absl::StrJoin(change->left, ","), "\nelastic.change",
                      change->number, ".world_size=", change->ranks.size(), "\nelastic.change",
                      change->number, ".resumed_step=", std::max<int64_t>(*resumed, 0),
                      "\nelastic.change", change->number, ".steps_rerun=", rerun, "\n");
      if (strategy.is_global_zero()) {
        std::fprintf(stderr,
                     "ddpspawn: elastic change %d: %zu ranks go on from the in-memory commit of "
                     "step %lld (%lld steps re-run)\n",
                     change->number, change->ranks.size(),
                     static_cast<long long>(std::max<int64_t>(*resumed, 0)),
                     static_cast<long long>(rerun));
      }
    }
  }
}

}  // namespace ddpspawn
