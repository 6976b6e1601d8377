// Gradient clipping over a list of gradient tensors, as torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_ do it (the same kernels in the same order, so the result is bit-equal), for
// Fabric::ClipGradients and the C ABI's clipping of a loop's own gradients (capi/gradients_api.cc).
// A non-finite norm is an error naming the gradient that holds a NaN or an infinity, and then
// nothing has been clipped.
#ifndef DDPSPAWN_CORE_FABRIC_GRADIENT_CLIPPING_H_
#define DDPSPAWN_CORE_FABRIC_GRADIENT_CLIPPING_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpspawn {

// Scales `gradients` in place so that their `norm_type` norm (infinity: the largest magnitude) is
// at most `max_norm`; returns the norm before clipping (0 for no gradients). When the norm is not
// finite: InvalidArgument naming `describe(i)` of the first gradient that is not, and nothing is
// scaled; so are max_norm < 0 and norm_type <= 0 (or NaN).
absl::StatusOr<double> ClipGradientNorm(const std::vector<at::Tensor>& gradients, double max_norm,
                                        double norm_type,
                                        const std::function<std::string(size_t)>& describe);

// Clamps every element of `gradients` to [-clip_value, clip_value], in place. A negative or
// non-finite clip_value is InvalidArgument.
absl::Status ClipGradientValue(const std::vector<at::Tensor>& gradients, double clip_value);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_FABRIC_GRADIENT_CLIPPING_H_
