// The optimizer fit steps with, made from a module's OptimizerConfig, and the
// gradient clipping before each step (Lightning's gradient_clip_algorithm).
#ifndef DDPSPAWN_CORE_TRAIN_OPTIMIZER_FACTORY_H_
#define DDPSPAWN_CORE_TRAIN_OPTIMIZER_FACTORY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/module.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

// Lightning's gradient_clip_algorithm: "norm" scales the gradients so that
// their global L2 norm is at most gradient_clip_val; "value" clamps each
// element to [-gradient_clip_val, gradient_clip_val].
enum class GradientClipAlgorithm { kNorm, kValue };
absl::string_view GradientClipAlgorithmName(GradientClipAlgorithm algorithm);
absl::StatusOr<GradientClipAlgorithm> ParseGradientClipAlgorithm(absl::string_view name);

// The optimizer `config` names ("sgd", "adam" or "adamw", with its learning
// rate, weight decay and, for sgd, momentum) over those of `parameters` that
// take gradients. InvalidArgument when none does, when the learning rate is
// not positive, or for another name.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerConfig& config, const std::vector<at::Tensor>& parameters);

// Scales the gradients so that their global L2 norm is at most `max_norm` (what
// torch.nn.utils.clip_grad_norm_ does).
void ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_OPTIMIZER_FACTORY_H_
