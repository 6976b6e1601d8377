// Gradient clipping by norm and by value over gradient tensors (see the header).
#include "core/fabric/gradient_clipping.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/max.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>
#include <c10/util/StringUtil.h>

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"

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

}  // namespace

absl::StatusOr<double> ClipGradientNorm(const std::vector<at::Tensor>& gradients, double max_norm,
                                        double norm_type,
                                        const std::function<std::string(size_t)>& describe) {
  if (!(max_norm >= 0) || std::isnan(norm_type) || norm_type <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clipping gradients needs max_norm >= 0 and a norm type above 0 (got ",
                     max_norm, " and ", norm_type, ")"));
  }
  if (gradients.empty()) return 0.0;
  return StatusOnException("clipping the gradients", [&]() -> absl::StatusOr<double> {
    c10::NoGradGuard no_grad;
    const at::Tensor total = TotalNorm(gradients, norm_type);
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
      return absl::InvalidArgumentError(
          absl::StrCat("the gradients' norm is ", norm, " (each is finite; their norm overflows)"));
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

}  // namespace ddpspawn
