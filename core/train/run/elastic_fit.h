// Elastic fit (Horovod elastic's model, on ddpspawn's launcher): fit with in-memory commits, and
// when the job loses ranks (the launcher drops a rank that was killed or crashed, core/launch/
// membership.h), the survivors leave their failed collective, form a new group among themselves,
// take the last commit from their new rank 0 (a broadcast: every survivor continues from the same
// bytes, also when one of them had committed once more), and fit on from it on fewer ranks, the
// rest of the epoch dealt among them (EpochPositionAfter, sampler.h). No process restarts and
// nothing is read from disk. Runs inside every rank of a ddpspawn launcher's job.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_ELASTIC_FIT_H_
#define DDPSPAWN_CORE_TRAIN_RUN_ELASTIC_FIT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/module.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/data/dataset.h"
#include "core/train/loop/fit_result.h"
#include "core/train/loop/trainer_options.h"

namespace ddpspawn {

struct ElasticFitResult {
  FitResult fit;
  // The result's elastic keys: elastic.world_size (the ranks it ended with), elastic.changes, and
  // per change K elastic.changeK.{left,world_size,resumed_step,steps_rerun} (the ranks as launched
  // that left, the ranks that went on, the commit's step, the steps done since then that were
  // lost).
  std::string keys;
};

// Fit on `strategy` (SetupDistributed() done, by a ddpspawn launcher with min_ranks), committing
// every `commit_every_n_steps` optimizer steps. A failure that the launcher answers with a
// membership change within a few seconds (a collective's, when a peer is gone) is survived as
// above; any other ends the fit as it would without elasticity. New rank 0 says on stderr where the
// survivors continue from.
absl::StatusOr<ElasticFitResult> ElasticFit(DDPSpawnStrategy& strategy, TrainerOptions options,
                                            int64_t commit_every_n_steps,
                                            const std::shared_ptr<LightningModule>& module,
                                            const Dataset& train, const Dataset* validation);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_ELASTIC_FIT_H_
