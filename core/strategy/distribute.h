// Distribute(model, strategy): the own loop's one call to make a LibTorch module data-parallel
// under a DDPSpawnStrategy (Lightning Fabric's fabric.setup(model)). It applies everything the
// strategy was given: sync_batchnorm (the BatchNorm layers become SyncBatchNorm first), the device,
// the DDP options and the communication hook. The group form, Distribute(model, group)
// (core/ddp/ddp_module.h), is torch's DistributedDataParallel(model, process_group): it applies
// none of them, and refuses a BatchNorm layer when the group's strategy has sync_batchnorm.
//
//   Net model;  // every change to the model (layers, dtype) comes before this
//   ASSIGN_OR_RETURN(ddpspawn::DdpModule<Net> ddp, ddpspawn::Distribute(model, strategy));
//   torch::optim::Adam optimizer(model.parameters());  // before or after: the same tensors
#ifndef DDPSPAWN_CORE_STRATEGY_DISTRIBUTE_H_
#define DDPSPAWN_CORE_STRATEGY_DISTRIBUTE_H_

#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "core/ddp/ddp_module.h"
#include "core/strategy/ddp_spawn_strategy.h"

namespace ddpspawn {

// A module holder (`Net net;` for `TORCH_MODULE(Net)`): shares its module.
template <typename Holder, typename Module = typename Holder::ContainedType>
absl::StatusOr<DdpModule<Module>> Distribute(Holder& holder, DDPSpawnStrategy& strategy) {
  std::shared_ptr<Module> module = holder.ptr();
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      strategy.WrapModule(*module, std::static_pointer_cast<torch::nn::Module>(module));
  if (!ddp.ok()) return ddp.status();
  return DdpModule<Module>(std::move(module), *std::move(ddp));
}

// A module held by value (`struct Net : torch::nn::Module`): borrowed; it must outlive the
// DdpModule.
template <typename Module,
          typename = std::enable_if_t<std::is_base_of_v<torch::nn::Module, Module>>>
absl::StatusOr<DdpModule<Module>> Distribute(Module& module, DDPSpawnStrategy& strategy) {
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      strategy.WrapModule(static_cast<torch::nn::Module&>(module));
  if (!ddp.ok()) return ddp.status();
  return DdpModule<Module>(std::shared_ptr<Module>(std::shared_ptr<Module>(), &module),
                           *std::move(ddp));
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_DISTRIBUTE_H_
