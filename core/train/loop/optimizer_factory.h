// The optimizer fit steps with, made from a module's OptimizerConfig, and the gradient clipping
// before each step (Lightning's gradient_clip_algorithm).
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_OPTIMIZER_FACTORY_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_OPTIMIZER_FACTORY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/module.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

// Lightning's gradient_clip_algorithm: "norm" scales the gradients so that their global L2 norm is
// at most gradient_clip_val; "value" clamps each element to [-gradient_clip_val,
// gradient_clip_val].
enum class GradientClipAlgorithm { kNorm, kValue };
absl::string_view GradientClipAlgorithmName(GradientClipAlgorithm algorithm);
absl::StatusOr<GradientClipAlgorithm> ParseGradientClipAlgorithm(absl::string_view name);

// InvalidArgument for a learning rate that is not positive, or an option the named optimizer does
// not have (betas but for adam and adamw, eps for sgd, momentum but for sgd and rmsprop). A custom
// factory is not checked.
absl::Status CheckOptimizerConfig(const OptimizerConfig& config);

// The optimizer `config` names (with its learning rate, weight decay and the options
// CheckOptimizerConfig allows it), or config.custom's, over those of `parameters` that take
// gradients. InvalidArgument when none does, or for a config CheckOptimizerConfig refuses.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerConfig& config, const std::vector<at::Tensor>& parameters);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_OPTIMIZER_FACTORY_H_
