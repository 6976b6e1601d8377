// The C ABI's gradient clipping of DLPack tensors (ddpspawn_dlpack.h): the tensors viewed without a
// copy (dlpack_view.h) and clipped by the core's gradient clipping (core/ddp/gradient_clipping.h),
// the function C++'s Fabric::ClipGradients calls.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/dlpack_view.h"
#include "capi/status.h"
#include "core/ddp/gradient_clipping.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn_dlpack.h"

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;
using ddpspawn::capi::ViewOf;

namespace {

// Views of gradients[i], i < count.
absl::StatusOr<std::vector<at::Tensor>> Views(DLTensor* const* gradients, size_t count) {
  std::vector<at::Tensor> views;
  if (count == 0) return views;
  RETURN_IF_ERROR(NotNull(gradients, "gradients"));
  for (size_t i = 0; i < count; ++i) {
    const std::string name = absl::StrCat("gradients[", i, "]");
    ASSIGN_OR_RETURN(at::Tensor view, ViewOf(gradients[i], name.c_str()));
    views.push_back(std::move(view));
  }
  return views;
}

}  // namespace

extern "C" {

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_clip_grad_norm_dlpack(const char* const* names,
                                                               DLTensor* const* gradients,
                                                               size_t count, double max_norm,
                                                               double norm_type, double* out_norm) {
  return StatusCodeOf([&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> views, Views(gradients, count));
    ASSIGN_OR_RETURN(double norm,
                     ddpspawn::ClipGradientNorm(views, max_norm, norm_type, [&](size_t i) {
                       if (names != nullptr && names[i] != nullptr) return std::string(names[i]);
                       return absl::StrCat("gradients[", i, "]");
                     }));
    if (out_norm != nullptr) *out_norm = norm;
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_clip_grad_value_dlpack(DLTensor* const* gradients,
                                                                size_t count, double clip_value) {
  return StatusCodeOf([&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> views, Views(gradients, count));
    return ddpspawn::ClipGradientValue(views, clip_value);
  });
}

}  // extern "C"
