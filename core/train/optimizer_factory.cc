// The optimizer factory and gradient clipping (see optimizer_factory.h).
#include "core/train/optimizer_factory.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim.h>

#include <cmath>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"

namespace ddpspawn {

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerConfig& config, const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> trainable;
  for (const at::Tensor& p : parameters) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  if (trainable.empty()) return absl::InvalidArgumentError("the model has no trainable parameter");
  if (!(config.lr > 0)) return absl::InvalidArgumentError("the learning rate must be positive");
  switch (config.optimizer) {
    case Optimizer::kSgd:
      return std::unique_ptr<torch::optim::Optimizer>(
          new torch::optim::SGD(trainable, torch::optim::SGDOptions(config.lr)
                                               .momentum(config.momentum)
                                               .weight_decay(config.weight_decay)));
    case Optimizer::kAdam:
      return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::Adam(
          trainable, torch::optim::AdamOptions(config.lr).weight_decay(config.weight_decay)));
    case Optimizer::kAdamW:
      return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::AdamW(
          trainable, torch::optim::AdamWOptions(config.lr).weight_decay(config.weight_decay)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer ", static_cast<int>(config.optimizer)));
}

// Scales the gradients so that their global L2 norm is at most `max_norm` (what
// torch.nn.utils.clip_grad_norm_ does).
void ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm) {
  c10::NoGradGuard no_grad;
  double squares = 0;
  for (const at::Tensor& p : parameters) {
    if (p.grad().defined()) squares += p.grad().norm().pow(2).item<double>();
  }
  const double scale = max_norm / (std::sqrt(squares) + 1e-6);
  if (scale >= 1) return;
  for (const at::Tensor& p : parameters) {
    if (p.grad().defined()) p.grad().mul_(scale);
  }
}

constexpr NamedValue<GradientClipAlgorithm> kGradientClipAlgorithmNames[] = {
    {"norm", GradientClipAlgorithm::kNorm},
    {"value", GradientClipAlgorithm::kValue},
};

absl::string_view GradientClipAlgorithmName(GradientClipAlgorithm algorithm) {
  return NameOf(kGradientClipAlgorithmNames, algorithm);
}

absl::StatusOr<GradientClipAlgorithm> ParseGradientClipAlgorithm(absl::string_view name) {
  return ParseName(kGradientClipAlgorithmNames, "gradient clip algorithm", name);
}

}  // namespace ddpspawn
