// Borrowed DLPack tensors as at::Tensor views (see dlpack_view.h).
#include "capi/dlpack_view.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/status.h"
#include "core/comm/cuda/cuda_support.h"
#include "core/util/status_macros.h"

namespace ddpspawn::capi {

namespace {

// "float32", "bfloat16", ... for the element types ddpspawn_dlpack.h accepts; "" for any other.
std::string DTypeName(DLDataType dtype) {
  if (dtype.lanes != 1) return "";
  const int bits = dtype.bits;
  switch (dtype.code) {
    case kDLFloat:
      return bits == 16 || bits == 32 || bits == 64 ? absl::StrCat("float", bits) : "";
    case kDLBfloat:
      return bits == 16 ? "bfloat16" : "";
    case kDLInt:
      return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? absl::StrCat("int", bits) : "";
    case kDLUInt:
      return bits == 8 ? "uint8" : "";
    case kDLBool:
      return bits == 8 ? "bool" : "";
    default:
      return "";
  }
}

}  // namespace

// Checks `tensor` (named `name` in errors) against what ddpspawn_dlpack.h accepts and returns a
// tensor over its memory, which stays the caller's: the view must not outlive it.
absl::StatusOr<at::Tensor> ViewOf(const DLTensor* tensor, const char* name) {
  RETURN_IF_ERROR(NotNull(tensor, name));
  const DLTensor& t = *tensor;
  if (t.ndim < 0) return absl::InvalidArgumentError(absl::StrCat(name, ".ndim is ", t.ndim));
  if (t.ndim > 0 && t.shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape is NULL with ndim ", t.ndim));
  }
  int64_t elements = 1;
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".shape[", d, "] is ", t.shape[d], "; sizes are never negative"));
    }
    if (t.shape[d] > 0 && elements > INT64_MAX / 8 / t.shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has too many elements"));
    }
    elements *= t.shape[d];
  }
  if (t.strides != nullptr &&
      elements > 0) {  // compact row-major: each stride is the product of the later sizes
    int64_t expected = 1;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " is not C-contiguous (dimension ", d, " has stride ", t.strides[d],
                         " where a compact row-major layout has ", expected,
                         "); pass a contiguous copy (e.g. tensor.contiguous())"));
      }
      expected *= t.shape[d];
    }
  }
  if (DTypeName(t.dtype).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " has an unsupported element type (DLPack code ", t.dtype.code, ", ", t.dtype.bits,
        " bits, ", t.dtype.lanes,
        " lanes); supported are float16, bfloat16, float32, float64, int8, uint8, int16, int32, "
        "int64 and bool, one lane"));
  }
  if (t.device.device_type == kDLCUDA) {
    absl::StatusOr<const ddpspawn::CudaSupport*> cuda = ddpspawn::LoadCudaSupport();
    if (!cuda.ok()) {
      return absl::UnavailableError(absl::StrCat(name, " is on CUDA device ", t.device.device_id,
                                                 ": ", cuda.status().message()));
    }
    if ((*cuda)->DeviceCount() == 0) {
      return absl::UnavailableError(
          absl::StrCat(name, " is on CUDA device ", t.device.device_id,
                       ", but this process sees no CUDA device (a CPU-only LibTorch, no GPU, or "
                       "CUDA_VISIBLE_DEVICES hides it)"));
    }
  } else if (t.device.device_type != kDLCPU) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is on DLPack device type ", static_cast<int>(t.device.device_type),
                     "; supported are CPU (", static_cast<int>(kDLCPU), ") and CUDA (",
                     static_cast<int>(kDLCUDA), ")"));
  }
  if (elements > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".data is NULL with ", elements, " elements"));
  }
  DLManagedTensor borrowed{};
  borrowed.dl_tensor = t;
  // fromDLPack would call borrowed.deleter when the view goes; this frees nothing.
  return at::fromDLPack(&borrowed, [](void*) {});
}

}  // namespace ddpspawn::capi
