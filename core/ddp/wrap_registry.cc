// The process-wide record of wrapped modules and group rules (see wrap_registry.h).
#include "core/ddp/wrap_registry.h"

#include <torch/nn/module.h>

#include <iterator>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace ddpspawn {
namespace {

struct Registry {
  absl::Mutex mutex;
  // Each wrapped module (and those under it) -> the claim that holds it.
  std::unordered_map<const torch::nn::Module*, const WrapClaim*> wrapped ABSL_GUARDED_BY(mutex);
  std::unordered_map<const ProcessGroup*, GroupWrapRules> rules ABSL_GUARDED_BY(mutex);
};

Registry& TheRegistry() {
  static Registry* const registry = new Registry();  // never destroyed: used until exit
  return *registry;
}

// `module` and every module under it.
std::vector<const torch::nn::Module*> Tree(const torch::nn::Module& module) {
  std::vector<const torch::nn::Module*> tree = {&module};
  for (const std::shared_ptr<torch::nn::Module>& child : module.modules(/*include_self=*/false)) {
    tree.push_back(child.get());
  }
  return tree;
}

// The error for `tree` (a module, then those under it) when one of them is wrapped; OK otherwise.
absl::Status WrappedError(const Registry& registry,
                          const std::vector<const torch::nn::Module*>& tree)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry.mutex) {
  for (const torch::nn::Module* member : tree) {
    if (registry.wrapped.count(member) != 0) {
      return absl::FailedPreconditionError(
          member == tree.front()
              ? "this module is already wrapped by a DistributedDataParallel: Distribute a "
                "module once, and use that wrapper"
              : "a module inside this one is already wrapped by a DistributedDataParallel: "
                "wrap the whole model once, not a part of it and then the whole");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WrapClaim::Make(const torch::nn::Module& module, WrapClaim& claim) {
  Registry& registry = TheRegistry();
  const std::vector<const torch::nn::Module*> tree = Tree(module);
  absl::MutexLock lock(&registry.mutex);
  if (absl::Status wrapped = WrappedError(registry, tree); !wrapped.ok()) return wrapped;
  for (const torch::nn::Module* member : tree) registry.wrapped.emplace(member, &claim);
  claim.held_ = true;
  return absl::OkStatus();
}

WrapClaim::~WrapClaim() {
  if (!held_) return;
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mutex);
  for (auto it = registry.wrapped.begin(); it != registry.wrapped.end();) {
    it = it->second == this ? registry.wrapped.erase(it) : std::next(it);
  }
}

bool IsWrapped(const torch::nn::Module& module) { return !CheckNotWrapped(module).ok(); }

absl::Status CheckNotWrapped(const torch::nn::Module& module) {
  Registry& registry = TheRegistry();
  const std::vector<const torch::nn::Module*> tree = Tree(module);
  absl::MutexLock lock(&registry.mutex);
  return WrappedError(registry, tree);
}

void SetGroupWrapRules(const ProcessGroup* group, GroupWrapRules rules) {
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mutex);
  if (rules.sync_batchnorm) {
    registry.rules[group] = rules;
  } else {
    registry.rules.erase(group);
  }
}

GroupWrapRules GroupWrapRulesOf(const ProcessGroup* group) {
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mutex);
  auto it = registry.rules.find(group);
  return it == registry.rules.end() ? GroupWrapRules{} : it->second;
}

}  // namespace ddpspawn
