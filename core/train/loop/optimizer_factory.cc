// The optimizer factory and gradient clipping (see optimizer_factory.h).
#include "core/train/loop/optimizer_factory.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::Status CheckOptimizerConfig(const OptimizerConfig& config) {
  if (config.custom) return absl::OkStatus();
  if (!(config.lr > 0)) return absl::InvalidArgumentError("the learning rate must be positive");
  const Optimizer kind = config.optimizer;
  const bool adam = kind == Optimizer::kAdam || kind == Optimizer::kAdamW;
  if (config.betas.has_value() && !adam) {
    return absl::InvalidArgumentError(
        absl::StrCat("betas are Adam's and AdamW's, not ", OptimizerClassName(kind), "'s"));
  }
  if (config.eps.has_value() && kind == Optimizer::kSgd) {
    return absl::InvalidArgumentError("eps is not an option of SGD");
  }
  if (config.momentum != 0 && kind != Optimizer::kSgd && kind != Optimizer::kRmsprop) {
    return absl::InvalidArgumentError(
        absl::StrCat("momentum is SGD's and RMSprop's, not ", OptimizerClassName(kind), "'s"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerConfig& config, const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> trainable;
  for (const at::Tensor& p : parameters) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  if (trainable.empty()) return absl::InvalidArgumentError("the model has no trainable parameter");
  if (config.custom) {
    std::unique_ptr<torch::optim::Optimizer> custom = config.custom(trainable);
    if (custom == nullptr)
      return absl::InvalidArgumentError("the custom optimizer factory gave none");
    return custom;
  }
  RETURN_IF_ERROR(CheckOptimizerConfig(config));
  const Optimizer kind = config.optimizer;
  using torch::optim::Optimizer;
  switch (kind) {
    case ddpspawn::Optimizer::kSgd:
      return std::unique_ptr<Optimizer>(
          new torch::optim::SGD(trainable, torch::optim::SGDOptions(config.lr)
                                               .momentum(config.momentum)
                                               .weight_decay(config.weight_decay)));
    case ddpspawn::Optimizer::kAdam: {
      torch::optim::AdamOptions options(config.lr);
      options.weight_decay(config.weight_decay);
      if (config.betas) options.betas({config.betas->first, config.betas->second});
      if (config.eps) options.eps(*config.eps);
      return std::unique_ptr<Optimizer>(new torch::optim::Adam(trainable, options));
    }
    case ddpspawn::Optimizer::kAdamW: {
      torch::optim::AdamWOptions options(config.lr);
      options.weight_decay(config.weight_decay);
      if (config.betas) options.betas({config.betas->first, config.betas->second});
      if (config.eps) options.eps(*config.eps);
      return std::unique_ptr<Optimizer>(new torch::optim::AdamW(trainable, options));
    }
    case ddpspawn::Optimizer::kRmsprop: {
      torch::optim::RMSpropOptions options(config.lr);
      options.momentum(config.momentum).weight_decay(config.weight_decay);
      if (config.eps) options.eps(*config.eps);
      return std::unique_ptr<Optimizer>(new torch::optim::RMSprop(trainable, options));
    }
    case ddpspawn::Optimizer::kAdagrad: {
      torch::optim::AdagradOptions options(config.lr);
      options.weight_decay(config.weight_decay);
      if (config.eps) options.eps(*config.eps);
      return std::unique_ptr<Optimizer>(new torch::optim::Adagrad(trainable, options));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer ", static_cast<int>(kind)));
}

// Scales the gradients so that their global L2 norm is at most `max_norm` (what
// torch.nn.utils.clip_grad_norm_ does).
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
