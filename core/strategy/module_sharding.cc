// full_shard for the strategy's module (see module_sharding.h).
#include "core/strategy/module_sharding.h"

#include <torch/nn/module.h>

#include <utility>
#include <vector>

#include "core/util/status_macros.h"

namespace ddpspawn {

absl::StatusOr<ShardedModule> ShardModule(LightningModule& module, ProcessGroup* group,
                                          const DdpOptions& ddp_options) {
  FullShardOptions options;
  options.ddp = ddp_options;
  ShardedModule sharded;
  auto* network = dynamic_cast<NnModule*>(&module);
  std::vector<std::shared_ptr<torch::nn::Module>> units = module.ShardUnits();
  if (network != nullptr && !units.empty()) {
    ASSIGN_OR_RETURN(sharded.shard, FullShard::Wrap(network->network(), units, group, options));
    module.UseFullShard(sharded.shard.get());
    return sharded;
  }
  std::vector<at::Tensor> trainable;
  for (const at::Tensor& p : module.parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  ASSIGN_OR_RETURN(sharded.shard, FullShard::Wrap(module.parameters(), module.buffers(),
                                                  {trainable}, group, options));
  sharded.whole_model_unit = true;
  return sharded;
}

absl::StatusOr<at::Tensor> ShardedModule::TrainingStep(LightningModule& module, const Batch& batch,
                                                       int64_t batch_index) const {
  if (!whole_model_unit) return module.TrainingStep(batch, batch_index);
  absl::Status failed;
  absl::StatusOr<at::Tensor> loss = shard->Forward(0, [&]() -> at::Tensor {
    absl::StatusOr<at::Tensor> step = module.TrainingStep(batch, batch_index);
    if (!step.ok()) failed = step.status();
    return step.ok() ? *std::move(step) : at::Tensor();
  });
  if (!failed.ok()) return failed;
  return loss;
}

}  // namespace ddpspawn
