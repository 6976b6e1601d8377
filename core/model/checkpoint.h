// Checkpoint contents: the module's state (parameters and buffers by name), the optimizer's state,
// where training stands (epoch, step, position in the epoch) and the CPU random generator, so that
// resuming continues exactly where training stopped. Serialized with LibTorch's archives.
#ifndef DDPSPAWN_CORE_MODEL_CHECKPOINT_H_
#define DDPSPAWN_CORE_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/module.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

struct TrainingState {
  int64_t epoch = 0;           // the epoch training is in (or starts next)
  int64_t batch_in_epoch = 0;  // the next batch of that epoch
  // Where in that epoch's order the ranks' dealing began (DistributedSampler::set_start): 0, but in
  // an epoch resumed mid-way on another number of ranks, which deal the rest of it among them.
  int64_t epoch_start = 0;
  int64_t global_step = 0;  // optimizer steps so far
  // Each rank's CPU generator state (at::Generator::get_state()), indexed by rank.
  std::vector<at::Tensor> cpu_rng_per_rank;
  // The number of ranks that saved it (0: not recorded, an older checkpoint).
  int64_t world_size = 0;
  // "16-mixed"'s loss scale and its good steps in a row (0: no loss scaler).
  double grad_scale = 0;
  int64_t grad_scale_growth_tracker = 0;
  // Each fit callback's state (Callback::OnSaveCheckpoint), by its name.
  std::map<std::string, std::string> callback_states;
  // Saved mid-epoch: each rank's training losses of the epoch so far, summed (indexed by rank),
  // over epoch_loss_batches batches each; a fit resumed there reports the whole epoch's
  // train_loss_epoch, not only its own part.
  std::vector<double> epoch_loss_sum_per_rank;
  int64_t epoch_loss_batches = 0;
};

// `optimizer` may be null (model only).
absl::StatusOr<std::string> SerializeCheckpoint(LightningModule& module,
                                                torch::optim::Optimizer* optimizer,
                                                const TrainingState& state);

// Restores what `bytes` holds into the module (and the optimizer and `state`, when not null). A
// tensor the module has and the checkpoint lacks, or with another shape, is an error that names it.
absl::Status RestoreCheckpoint(const std::string& bytes, LightningModule& module,
                               torch::optim::Optimizer* optimizer, TrainingState* state);

// Where training stood in a checkpoint (SerializeCheckpoint's bytes), without a module to restore
// its weights into: what a restart announces it continues from.
absl::StatusOr<TrainingState> ReadCheckpointTrainingState(const std::string& bytes);

// The training state alone (no weights, no optimizer state), as a sealed archive
// (sealed_archive.h): what a sharded checkpoint keeps beside its shards.
absl::StatusOr<std::string> SerializeTrainingState(const TrainingState& state);
absl::StatusOr<TrainingState> ParseTrainingState(const std::string& bytes);

// The weights a checkpoint holds (its model's parameters and buffers by name, on the CPU), without
// a module to restore them into; each must pass CheckWeightTensor (weights_io.h).
absl::StatusOr<NamedTensors> ReadCheckpointWeights(const std::string& bytes);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_CHECKPOINT_H_
