// Fit's checkpoints beyond their format (core/model/checkpoint.h): where fit writes them, every
// rank's RNG state in them, and resuming from one.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_CHECKPOINT_CONNECTOR_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_CHECKPOINT_CONNECTOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/checkpoint.h"
#include "core/model/module.h"
#include "core/train/loop/trainer_options.h"

namespace ddpspawn {

class DDPSpawnStrategy;

// Where fit writes its checkpoint: <default_root_dir>/checkpoints/last.ckpt.
std::string LastCheckpointPath(const TrainerOptions& options);

// The optimizer options a fit resumed from `checkpoint_bytes` goes on with: `module`'s
// ConfigureOptimizers(), with the learning rate, momentum and weight decay of the optimizer state
// saved there, which replace the configured ones when fit restores it (as torch's load_state_dict
// does; a learning-rate schedule then sets the rate from the configured one again). Restores the
// checkpoint into `module`; an optimizer state that does not fit the configured optimizer (SGD's
// and Adam's differ; Adam's and AdamW's have the same fields) is an error that says so.
absl::StatusOr<OptimizerConfig> ResumedOptimizerConfig(const std::string& checkpoint_bytes,
                                                       LightningModule& module);

// A checkpoint saved mid-epoch resumes on the number of ranks that saved it where they stopped; on
// another number, the rest of the epoch (the samples its ranks had not reached) is dealt among the
// new ranks (EpochPositionAfter, sampler.h), except when `epochs_limited` (limit_train_batches or
// overfit_batches, whose count of batches would then mean another thing): that is an error naming
// both numbers. From an epoch's end any number goes on (a fresh shard split; ranks beyond the saved
// ones seed afresh).
absl::Status CheckResumableOn(const TrainingState& state, int world, const std::string& path,
                              bool epochs_limited);

// Every rank's CPU generator state, on every rank (for the checkpoint). An all-gather: every rank
// calls it at the same point.
absl::StatusOr<std::vector<at::Tensor>> GatherRngStates(DDPSpawnStrategy& strategy);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_CHECKPOINT_CONNECTOR_H_
