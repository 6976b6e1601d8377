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

// Wraps `module` (on its device already) in a FullShard over `group`: over its ShardUnits(), which
// it then runs through the shard (UseFullShard), or, when it names none, the whole model as one
// unit.
absl::StatusOr<ShardedModule> ShardModule(LightningModule& module, ProcessGroup* group,
                                          const DdpOptions& ddp_options);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_MODULE_SHARDING_H_
