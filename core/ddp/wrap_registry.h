// The modules that a live DistributedDataParallel wraps, and what a strategy asks of every wrapper
// over its group: the process-wide record that lets the own-loop API refuse what would silently
// break gradient sync (Distribute twice, ConvertSyncBatchNorm after Distribute, BatchNorm layers
// left in a module whose strategy has sync_batchnorm).
#ifndef DDPSPAWN_CORE_DDP_WRAP_REGISTRY_H_
#define DDPSPAWN_CORE_DDP_WRAP_REGISTRY_H_

#include "absl/status/status.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ddpspawn {

class ProcessGroup;

// Thread-safe (one mutex); it holds only addresses, never owns a module or a group. A claim lasts
// while its WrapClaim lives.
class WrapClaim {
 public:
  // Records `module` and every module under it as wrapped. FailedPrecondition, naming the fix, when
  // any of them is already wrapped.
  static absl::Status Make(const torch::nn::Module& module, WrapClaim& claim);
  WrapClaim() = default;
  ~WrapClaim();
  WrapClaim(const WrapClaim&) = delete;
  WrapClaim& operator=(const WrapClaim&) = delete;

 private:
  bool held_ = false;
};

// Whether `module`, or a module under it, is wrapped by a live DistributedDataParallel.
bool IsWrapped(const torch::nn::Module& module);
// OK when IsWrapped(module) is false; else WrapClaim::Make's error.
absl::Status CheckNotWrapped(const torch::nn::Module& module);

// What a strategy asks of every module wrapped over its group.
struct GroupWrapRules {
  // The module must hold no BatchNorm1d/2d/3d: the strategy's sync_batchnorm was set, and only its
  // own Distribute converts them.
  bool sync_batchnorm = false;
};
// Set by the strategy that owns `group` while the group lives; cleared with default rules.
void SetGroupWrapRules(const ProcessGroup* group, GroupWrapRules rules);
GroupWrapRules GroupWrapRulesOf(const ProcessGroup* group);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_WRAP_REGISTRY_H_
