// full_shard for the strategy's module (see module_sharding.h).
#include "core/strategy/module_sharding.h"

#include <torch/nn/module.h>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/ddp/size_based_units.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::Status CheckAutoWrap(LightningModule& module, int64_t auto_wrap_min_params) {
  if (auto_wrap_min_params <= 0) return absl::OkStatus();
  if (dynamic_cast<NnModule*>(&module) != nullptr && !module.ShardUnits().empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "auto_wrap_min_params needs a model whose forward runs its parts through the shard (the "
      "built-in mlp, or a module that names its ShardUnits()); a TorchScript model cannot call "
      "back between its layers, so it is one unit, gathered whole for each step");
}

absl::StatusOr<ShardedModule> ShardModule(LightningModule& module, ProcessGroup* group,
                                          const FullShardOptions& options,
                                          int64_t auto_wrap_min_params) {
  ShardedModule sharded;
  auto* network = dynamic_cast<NnModule*>(&module);
  std::vector<std::shared_ptr<torch::nn::Module>> units = module.ShardUnits();
  if (auto_wrap_min_params > 0) {
    RETURN_IF_ERROR(CheckAutoWrap(module, auto_wrap_min_params));
    units = SizeBasedUnits(network->network(), auto_wrap_min_params);
  }
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
