// DdpModule: a LibTorch module with torch's DDP forward, so that the natural training loop (`auto
// out = model(x); loss(out).backward(); opt.step();`) is the right one. Its forward runs
// DistributedDataParallel::PrepareForward() (rank 0's buffers, when broadcast_buffers) and then the
// module's own. Distribute() wraps a module holder (a TORCH_MODULE type) or a module held by value,
// which it borrows, over a group, as torch's DDP does; under a DDPSpawnStrategy, Distribute(model,
// strategy) (core/strategy/distribute.h) also applies the strategy's sync_batchnorm, device, DDP
// options and hook.
#ifndef DDPSPAWN_CORE_DDP_DDP_MODULE_H_
#define DDPSPAWN_CORE_DDP_DDP_MODULE_H_

#include <torch/nn/module.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"

namespace ddpspawn {

// Thread safety and ownership: those of DistributedDataParallel, which it owns. It shares a
// holder's module, or borrows a module held by value (which must outlive it).
template <typename ModuleType>
class DdpModule {
 public:
  DdpModule(std::shared_ptr<ModuleType> module, std::unique_ptr<DistributedDataParallel> ddp)
      : module_(std::move(module)), ddp_(std::move(ddp)) {}

  // PrepareForward(), then the module's forward with `inputs`.
  template <typename... Inputs>
  auto Forward(Inputs&&... inputs) -> absl::StatusOr<
      decltype(std::declval<ModuleType&>().forward(std::forward<Inputs>(inputs)...))> {
    if (absl::Status prepared = ddp_->PrepareForward(); !prepared.ok()) return prepared;
    return module_->forward(std::forward<Inputs>(inputs)...);
  }

  // Forward() as a LibTorch module is called: its error is thrown, as a module's forward throws
  // (std::runtime_error with the status's text).
  template <typename... Inputs>
  auto operator()(Inputs&&... inputs) {
    auto output = Forward(std::forward<Inputs>(inputs)...);
    if (!output.ok()) throw std::runtime_error(std::string(output.status().ToString()));
    return *std::move(output);
  }

  ModuleType* operator->() { return module_.get(); }
  ModuleType& module() { return *module_; }
  DistributedDataParallel& ddp() { return *ddp_; }
  // DistributedDataParallel::no_sync: `enabled` false changes nothing.
  DistributedDataParallel::NoSync no_sync(bool enabled = true) { return ddp_->no_sync(enabled); }

 private:
  std::shared_ptr<ModuleType> module_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// A module holder (`Net net;` for `TORCH_MODULE(Net)`): shares its module.
template <typename Holder, typename Module = typename Holder::ContainedType>
absl::StatusOr<DdpModule<Module>> Distribute(Holder& holder, ProcessGroup* group,
                                             const DdpOptions& options = {}) {
  std::shared_ptr<Module> module = holder.ptr();
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp = DistributedDataParallel::Wrap(
      std::static_pointer_cast<torch::nn::Module>(module), group, options);
  if (!ddp.ok()) return ddp.status();
  return DdpModule<Module>(std::move(module), *std::move(ddp));
}

// A module held by value (`struct Net : torch::nn::Module`): borrowed; it must outlive the
// DdpModule.
template <typename Module,
          typename = std::enable_if_t<std::is_base_of_v<torch::nn::Module, Module>>>
absl::StatusOr<DdpModule<Module>> Distribute(Module& module, ProcessGroup* group,
                                             const DdpOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Wrap(static_cast<torch::nn::Module&>(module), group, options);
  if (!ddp.ok()) return ddp.status();
  return DdpModule<Module>(std::shared_ptr<Module>(std::shared_ptr<Module>(), &module),
                           *std::move(ddp));
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_DDP_MODULE_H_
