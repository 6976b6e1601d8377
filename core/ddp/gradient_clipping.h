// Gradient clipping over a list of gradient tensors, as torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_ do it (the same kernels in the same order, so the result is bit-equal), for the
// Trainer's fit, Fabric::ClipGradients and the C ABI's clipping of a loop's own gradients
// (capi/gradients_api.cc). Over sharded gradients (each rank holds its rows: ZeRO, shard_grad_op,
// full_shard) the norm is the one of every rank's rows together, as FSDP's clip_grad_norm_ takes
// it. A non-finite norm is an error naming the gradient that holds a NaN or an infinity, and then
// nothing has been clipped.
#ifndef DDPSPAWN_CORE_DDP_GRADIENT_CLIPPING_H_
#define DDPSPAWN_CORE_DDP_GRADIENT_CLIPPING_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/comm/process_group.h"

namespace ddpspawn {

// Scales `gradients` in place so that their `norm_type` norm (infinity: the largest magnitude) is
// at most `max_norm`; returns the norm before clipping (0 for no gradients). With `shard_group`,
// each rank holds a shard of the gradients and the norm is taken over every rank's (a collective:
// every rank calls it, with or without gradients of its own). When the norm is not finite:
// InvalidArgument naming `describe(i)` of this rank's first gradient that is not, and nothing is
// scaled; so are max_norm < 0 and norm_type <= 0 (or NaN).
absl::StatusOr<double> ClipGradientNorm(const std::vector<at::Tensor>& gradients, double max_norm,
                                        double norm_type,
                                        const std::function<std::string(size_t)>& describe,
                                        ProcessGroup* shard_group = nullptr);

// ClipGradientNorm over the gradients of `parameters` (those without one are left out), naming a
// gradient in errors as "<what> <index> of <count>".
absl::StatusOr<double> ClipParameterGradientNorm(const std::vector<at::Tensor>& parameters,
                                                 double max_norm, double norm_type,
                                                 absl::string_view what,
                                                 ProcessGroup* shard_group = nullptr);

// Clamps every element of `gradients` to [-clip_value, clip_value], in place. A negative or
// non-finite clip_value is InvalidArgument.
absl::Status ClipGradientValue(const std::vector<at::Tensor>& gradients, double clip_value);

// ClipGradientValue over the gradients of `parameters` (those without one are left out).
absl::Status ClipParameterGradientValue(const std::vector<at::Tensor>& parameters,
                                        double clip_value);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_GRADIENT_CLIPPING_H_
