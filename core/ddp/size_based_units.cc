// The size-based choice of FullShard's units (see size_based_units.h).
#include "core/ddp/size_based_units.h"

#include <torch/nn/module.h>

#include <unordered_set>

namespace ddpspawn {
namespace {

// Appends the units under and including `module` (not `module` itself when `is_root`, which the
// caller decides) to `units`; returns the trainable elements `module` holds that no unit below it
// holds. `seen` keeps a shared parameter to the first module that holds it.
int64_t Visit(const std::shared_ptr<torch::nn::Module>& module, int64_t min_params, bool is_root,
              std::unordered_set<const void*>& seen,
              std::vector<std::shared_ptr<torch::nn::Module>>& units) {
  int64_t left = 0;
  for (const std::shared_ptr<torch::nn::Module>& child : module->children()) {
    left += Visit(child, min_params, /*is_root=*/false, seen, units);
  }
  for (const at::Tensor& p : module->parameters(/*recurse=*/false)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) left += p.numel();
  }
  if (!is_root && left >= min_params && left > 0) {
    units.push_back(module);
    return 0;
  }
  return left;
}

}  // namespace

std::vector<std::shared_ptr<torch::nn::Module>> SizeBasedUnits(
    const std::shared_ptr<torch::nn::Module>& module, int64_t min_params) {
  std::vector<std::shared_ptr<torch::nn::Module>> units;
  std::unordered_set<const void*> seen;
  if (Visit(module, min_params, /*is_root=*/true, seen, units) > 0) units.push_back(module);
  return units;
}

}  // namespace ddpspawn
