// The C ABI's checkpoints of named DLPack tensors (ddpspawn_dlpack.h): the tensors viewed without a
// copy (dlpack_view.h) and handed to the core's tensor checkpoints
// (core/fabric/tensor_checkpoint.h).
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/context.h"
#include "capi/dlpack_view.h"
#include "capi/status.h"
#include "core/fabric/tensor_checkpoint.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn_dlpack.h"

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;
using ddpspawn::capi::ViewOf;

namespace {

// names[i] and a view of tensors[i], for i < count.
template <typename TensorPointer>
absl::StatusOr<ddpspawn::NamedTensors> NamedViews(const char* const* names,
                                                  const TensorPointer* tensors, size_t count) {
  ddpspawn::NamedTensors named;
  if (count == 0) return named;
  RETURN_IF_ERROR(NotNull(names, "names"));
  RETURN_IF_ERROR(NotNull(tensors, "tensors"));
  for (size_t i = 0; i < count; ++i) {
    const std::string what = absl::StrCat("names[", i, "]");
    RETURN_IF_ERROR(NotNull(names[i], what.c_str()));
    const std::string tensor = absl::StrCat("tensors[", i, "] ('", names[i], "')");
    ASSIGN_OR_RETURN(at::Tensor view, ViewOf(tensors[i], tensor.c_str()));
    named.emplace_back(names[i], std::move(view));
  }
  return named;
}

}  // namespace

extern "C" {

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_checkpoint_save_dlpack(ddpspawn_context* context,
                                                                const char* path,
                                                                const char* const* names,
                                                                const DLTensor* const* tensors,
                                                                size_t count, int64_t step) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    RETURN_IF_ERROR(NotNull(path, "path"));
    // Only rank 0's tensors are read (a bad one is rank 0's failure, which every rank learns).
    return ddpspawn::SaveTensorCheckpoint(*context->group, path, step,
                                          [&] { return NamedViews(names, tensors, count); });
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_checkpoint_load_dlpack(const char* path,
                                                                const char* const* names,
                                                                DLTensor* const* tensors,
                                                                size_t count, int64_t* out_step) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(path, "path"));
    ASSIGN_OR_RETURN(ddpspawn::NamedTensors named, NamedViews(names, tensors, count));
    ASSIGN_OR_RETURN(int64_t step, ddpspawn::LoadTensorCheckpoint(path, named));
    if (out_step != nullptr) *out_step = step;
    return absl::OkStatus();
  });
}

}  // extern "C"
