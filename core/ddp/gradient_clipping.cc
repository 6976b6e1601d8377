// Gradient clipping by norm and by value over gradient tensors (see the header).
#include "core/ddp/gradient_clipping.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/max.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>
#include <c10/util/StringUtil.h>

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// The norm of each gradient, then of those norms, as clip_grad_norm_ takes them.
at::Tensor TotalNorm(const std::vector<at::Tensor>& gradients, double norm_type) {
  std::vector<at::Tensor> norms;
  norms.reserve(gradients.size());
  const bool largest = norm_type == std::numeric_limits<double>::infinity();
  for (const at::Tensor& gradient : gradients) {
    norms.push_back(largest ? gradient.abs().max() : gradient.norm(norm_type));
  }
  if (norms.size() == 1) return norms[0];
  return largest ? at::max(at::stack(norms)) : at::stack(norms).norm(norm_type);
}

// The norm over every rank's shard, from this rank's `local` norm (a float32 zero when it holds no
// gradient): the largest for the infinity norm, else the p-th root of the sum of p-th powers.
absl::StatusOr<at::Tensor> NormAcrossShards(const at::Tensor& local, double norm_type,
                                            ProcessGroup& shard_group) {
  const bool largest = norm_type == std::numeric_limits<double>::infinity();
  double value = local.item<double>();
  if (!largest) value = std::pow(value, norm_type);
  RETURN_IF_ERROR(
      shard_group.AllReduce(&value, 1, DType::kFloat64, largest ? ReduceOp::kMax : ReduceOp::kSum));
  if (!largest) value = std::pow(value, 1.0 / norm_type);
  return at::scalar_tensor(value, local.options());
}

std::vector<at::Tensor> DefinedGradients(const std::vector<at::Tensor>& parameters,
                                         std::vector<size_t>* indices) {
  std::vector<at::Tensor> gradients;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].grad().defined()) continue;
    gradients.push_back(parameters[i].grad());
    if (indices != nullptr) indices->push_back(i);
  }
  return gradients;
}

}  // namespace

absl::StatusOr<double> ClipGradientNorm(const std::vector<at::Tensor>& gradients, double max_norm,
                                        double norm_type,
                                        const std::function<std::string(size_t)>& describe,
                                        ProcessGroup* shard_group) {
  if (!(max_norm >= 0) || std::isnan(norm_type) || norm_type <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clipping gradients needs max_norm >= 0 and a norm type above 0 (got ",
                     max_norm, " and ", norm_type, ")"));
  }
  if (gradients.empty() && shard_group == nullptr) return 0.0;
  return StatusOnException("clipping the gradients", [&]() -> absl::StatusOr<double> {
    c10::NoGradGuard no_grad;
    at::Tensor total =
        gradients.empty() ? at::scalar_tensor(0.0, at::kFloat) : TotalNorm(gradients, norm_type);
    if (shard_group != nullptr) {
      ASSIGN_OR_RETURN(total, NormAcrossShards(total, norm_type, *shard_group));
    }
    const double norm = total.item<double>();
    if (!std::isfinite(norm)) {
      for (size_t i = 0; i < gradients.size(); ++i) {
        if (!at::isfinite(gradients[i]).all().item<bool>()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the gradient of ", describe(i), " (shape ", c10::str(gradients[i].sizes()),
              ") is not finite (a NaN or an infinity in the loss or the backward); nothing was "
              "clipped"));
        }
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "the gradients' norm is ", norm,
          shard_group != nullptr
              ? " (this rank's shards are finite: another rank's holds a NaN or an infinity, or "
                "their norm overflows)"
              : " (each is finite; their norm overflows)"));
    }
    const at::Tensor coefficient = at::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
    for (const at::Tensor& gradient : gradients) gradient.mul_(coefficient);
    return norm;
  });
}

absl::Status ClipGradientValue(const std::vector<at::Tensor>& gradients, double clip_value) {
  if (!(clip_value >= 0) || std::isinf(clip_value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "clipping gradient values needs a finite clip value >= 0 (got ", clip_value, ")"));
  }
  return StatusOnException("clipping the gradients' values", [&] {
    c10::NoGradGuard no_grad;
    for (const at::Tensor& gradient : gradients) gradient.clamp_(-clip_value, clip_value);
  });
}

absl::StatusOr<double> ClipParameterGradientNorm(const std::vector<at::Tensor>& parameters,
                                                 double max_norm, double norm_type,
                                                 absl::string_view what,
                                                 ProcessGroup* shard_group) {
  std::vector<size_t> indices;  // each gradient's parameter, for the error
  const std::vector<at::Tensor> gradients = DefinedGradients(parameters, &indices);
  return ClipGradientNorm(
      gradients, max_norm, norm_type,
      [&](size_t i) { return absl::StrCat(what, " ", indices[i], " of ", parameters.size()); },
      shard_group);
}

absl::Status ClipParameterGradientValue(const std::vector<at::Tensor>& parameters,
                                        double clip_value) {
  return ClipGradientValue(DefinedGradients(parameters, nullptr), clip_value);
}

}  // namespace ddpspawn
