// ShardGradOpOptimizer (ZeRO stage 2, FSDP's shard_grad_op): the optimizer half of gradient
// sharding. DDP's reducer, with shard_gradients, reduce-scatters each bucket so that every rank
// keeps only its rows of each averaged gradient (row_shards.h: FSDP2's dim-0 shards); this
// optimizer keeps the state of those rows only, steps them in place in the parameters, and
// all-gathers every rank's updated rows into every rank's parameters, a bucket (of the reducer's
// bucket_cap_mb) at a time. The parameters themselves stay whole on every rank. Its checkpoint
// state is the unsharded optimizer's, in LibTorch's own format: it resumes on any number of ranks,
// with or without sharding.
#ifndef DDPSPAWN_CORE_DDP_SHARD_GRAD_OP_OPTIMIZER_H_
#define DDPSPAWN_CORE_DDP_SHARD_GRAD_OP_OPTIMIZER_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/row_shards.h"
#include "core/ddp/sharded_optimizer.h"

namespace ddpspawn {

// Thread safety: thread-compatible, as ShardedOptimizer. Ownership: owns the shard's optimizer;
// borrows `ddp` (its reducer holds the gradient shards and its group carries the collectives),
// which must outlive it, and the parameters, which it updates in place.
class ShardGradOpOptimizer : public ShardedOptimizer {
 public:
  // Calls `make` for the optimizer to shard: every parameter it holds must be one that `ddp`
  // reduces, and `ddp` must have been wrapped with reducer.shard_gradients. SGD, Adam, AdamW,
  // RMSprop and Adagrad (elementwise: a row's update needs only that row), or another optimizer
  // whose state has not been created yet and is never consolidated.
  static absl::StatusOr<std::unique_ptr<ShardGradOpOptimizer>> Create(OptimizerFactory make,
                                                                      DistributedDataParallel& ddp);

  // Steps this rank's rows with the base groups' options, then all-gathers every rank's rows (not
  // under full_shard, whose next forward gathers them: Reducer::shard_parameters_detached()). A
  // collective. FailedPrecondition when no synchronized backward ran since the last step (under
  // no_sync the gradients are not reduced yet: step after the backward that ends the accumulation).
  absl::Status Step() override;

  absl::Status ConsolidateStateDict(int to = 0) override;
  // Reads an unsharded state (from this class, ZeroRedundancyOptimizer or the plain optimizer, on
  // any number of ranks) and keeps this rank's rows of it. Not a collective.
  void load(torch::serialize::InputArchive& archive) override;

  const torch::optim::Optimizer& shard_optimizer() const override { return *shard_; }
  int64_t shard_elements() const override { return shard_elements_; }
  // This rank's rows of every parameter (the reducer's shard parameters).
  std::vector<at::Tensor> StepGradientHolders() const override { return rows_; }
  ProcessGroup* gradient_shard_group() const override { return group_; }

  // What a sharded checkpoint (core/model/sharded_checkpoint.h) reads and writes besides
  // shard_optimizer().save(): the shard of another rank, or of another world size, read back.
  struct SavedShard {
    // The optimizer over `rows`, with the state read (its options too).
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    // Shaped like that rank's rows of each parameter of param_groups(), on the meta device: the
    // keys of its state.
    std::vector<at::Tensor> rows;
  };
  // Reads `archive` (what shard_optimizer().save() wrote on rank `rank` of `world`) into an
  // optimizer over that rank's rows. InvalidArgument when it does not fit.
  absl::StatusOr<SavedShard> ReadSavedShard(torch::serialize::InputArchive& archive, int rank,
                                            int world) const;
  // Replaces this rank's shard state: `states[i]` (null: none yet) is the state of this rank's rows
  // of parameter i, and every group takes `options_from`'s group options (a learning rate a
  // scheduler set, for one).
  absl::Status AdoptShardState(
      std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states,
      const torch::optim::Optimizer& options_from);
  // After this rank's rows of the parameters were written (a sharded checkpoint loaded into
  // StepGradientHolders()): every rank's rows into every rank's whole parameters. A collective;
  // nothing under full_shard, whose next forward gathers each unit.
  absl::Status GatherParameters();

 private:
  ShardGradOpOptimizer(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                       std::unique_ptr<torch::optim::OptimizerOptions> defaults,
                       OptimizerFactory make, DistributedDataParallel& ddp);
  // An optimizer from `make_` over `rank`'s rows of each parameter, with no state.
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeShard(
      const std::vector<at::Tensor>& rows) const;
  // The shard's state: this rank's rows of `full`'s (its options too).
  absl::Status AdoptState(const torch::optim::Optimizer& full);
  absl::Status AllGatherParameters();

  Reducer* reducer_;
  std::vector<at::Tensor> rows_;  // per parameter of param_groups(): the reducer's shard parameter
  int64_t shard_elements_ = 0;
  // The parameters' all-gather, a bucket at a time: indices into AllParameters(*this).
  std::vector<std::vector<size_t>> gather_buckets_;
  std::vector<SectionLayout> gather_layouts_;
  int64_t stepped_after_ = 0;  // the reducer's synchronized_backwards() at the last step
  std::unique_ptr<torch::optim::Optimizer> shard_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_SHARD_GRAD_OP_OPTIMIZER_H_
