// ZeroRedundancyOptimizer (ZeRO stage 1, torch's torch.distributed.optim.ZeroRedundancyOptimizer):
// each rank keeps the optimizer state of its own shard of the parameters only and steps that shard;
// the updated parameters then reach every rank through all-gathers of flat chunks, whose buffer
// stays below a fixed size however many ranks there are. Wraps any torch::optim optimizer,
// parameter groups included, and sits after DDP's gradient all-reduce (every rank holds the
// averaged gradients of every parameter; only the state and the step are sharded). Its checkpoint
// state is the unsharded optimizer's, in LibTorch's own format: it resumes on any number of ranks,
// with or without sharding.
#ifndef DDPSPAWN_CORE_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_
#define DDPSPAWN_CORE_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/sharded_optimizer.h"

namespace ddpspawn {

// Thread safety: thread-compatible; step(), ConsolidateStateDict() and load() are collectives or
// change the shard, so one thread drives it, as a training loop does. Ownership: owns the shard's
// optimizer; borrows the group, which must outlive it, and the parameters, which it updates in
// place. The base class's param_groups() list every parameter with the options a scheduler sets;
// each step copies them onto the shard's groups.
class ZeroRedundancyOptimizer : public ShardedOptimizer {
 public:
  // Calls `make` for the optimizer to shard. Every rank must call this with the same parameters
  // (count, shapes, groups, order); they must all be of one dtype and on one device. Parameters go
  // to ranks largest first, each to the rank with the fewest elements so far (torch's partition).
  // Each step's all-gather buffer (every rank's piece of a chunk of the shards) holds at most
  // `gather_buffer_bytes` (at least one element from each rank): a few collectives more a step for
  // a transient that no longer grows with the world size (4 MiB: 4 all-gathers a step on
  // tools/bench's MLP at 4 ranks, whose padded shards are 4 MiB each).
  static absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> Create(
      OptimizerFactory make, ProcessGroup* group, int64_t gather_buffer_bytes = int64_t{4} << 20);

  // Steps this rank's shard with the base groups' options, then all-gathers every rank's updated
  // shard into every rank's parameters. A collective.
  absl::Status Step() override;

  // Gathers every rank's shard of the state onto rank `to`, whose save() then writes the unsharded
  // optimizer's state. A collective (torch's consolidate_state_dict).
  absl::Status ConsolidateStateDict(int to = 0) override;
  // Reads an unsharded state (saved by this class, or by the wrapped optimizer without sharding, on
  // any number of ranks) and keeps this rank's shard of it. Not a collective.
  void load(torch::serialize::InputArchive& archive) override;

  // The rank that steps each parameter, in the order of param_groups() (group by group).
  const std::vector<int>& owners() const { return owners_; }
  // Elements of the parameters this rank steps.
  int64_t shard_elements() const override { return shard_elements_; }
  // The optimizer over this rank's shard.
  const torch::optim::Optimizer& shard_optimizer() const override { return *shard_; }
  // Every parameter: each rank holds every averaged gradient (DDP's all-reduce).
  std::vector<at::Tensor> StepGradientHolders() const override { return AllParameters(*this); }
  ProcessGroup* gradient_shard_group() const override { return nullptr; }

 private:
  ZeroRedundancyOptimizer(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                          std::unique_ptr<torch::optim::OptimizerOptions> defaults,
                          OptimizerFactory make, ProcessGroup* group);
  // An optimizer from `make_` keeping only the parameters `rank` owns.
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeShard(int rank) const;
  absl::Status AllGatherParameters();

  std::vector<int> owners_;
  std::vector<int64_t> elements_per_rank_;
  int64_t shard_elements_ = 0;
  int64_t gather_buffer_bytes_ = 0;
  std::unique_ptr<torch::optim::Optimizer> shard_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_
