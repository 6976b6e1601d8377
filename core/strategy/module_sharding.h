// sharding_strategy full_shard for the strategy's module: the FullShard that wraps it (over the
// units the module names, or the whole model as one unit) and how its training step runs.
#ifndef DDPSPAWN_CORE_STRATEGY_MODULE_SHARDING_H_
#define DDPSPAWN_CORE_STRATEGY_MODULE_SHARDING_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/full_shard.h"
#include "core/model/module.h"

namespace ddpspawn {

// Thread-compatible. Owns the FullShard, which borrows the group (it must outlive it) and whose
// hooks capture it (it must outlive every backward through the module).
struct ShardedModule {
  std::unique_ptr<FullShard> shard;
  // The module named no units (a TorchScript model's forward cannot call back between its layers):
  // the whole model is the shard's one unit, gathered around each training step.
  bool whole_model_unit = false;

  // `module`'s TrainingStep on `batch`, through the whole-model unit when there is one.
  absl::StatusOr<at::Tensor> TrainingStep(LightningModule& module, const Batch& batch,
                                          int64_t batch_index) const;
};

// OK when `module` can take full_shard's units by size (auto_wrap_min_params > 0): its forward runs
// its parts through the shard. Else InvalidArgument saying why (a TorchScript model).
absl::Status CheckAutoWrap(LightningModule& module, int64_t auto_wrap_min_params);

// Wraps `module` (on its device already) in a FullShard over `group`: over its ShardUnits(), or
// with `auto_wrap_min_params` > 0 over the units SizeBasedUnits() picks in its network, which it
// then runs through the shard (UseFullShard); when it names no units, the whole model as one unit
// (and auto_wrap_min_params is refused: its parts cannot run through the shard).
absl::StatusOr<ShardedModule> ShardModule(LightningModule& module, ProcessGroup* group,
                                          const FullShardOptions& options,
                                          int64_t auto_wrap_min_params = 0);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_MODULE_SHARDING_H_
