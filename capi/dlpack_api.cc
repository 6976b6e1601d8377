// The C ABI's collectives and reducer on borrowed DLPack tensors (ddpspawn_dlpack.h): each DLTensor
// is checked, viewed as an at::Tensor over the caller's memory without a copy (at::fromDLPack, with
// a deleter that frees nothing), and handed to the process group's tensor collectives or the
// reducer.
//
// LibTorch's DLConvertor.h comes first: it brings LibTorch's own copy of dlpack.h, whose include
// guard the public header's <dlpack/dlpack.h> shares, so the library is compiled against one
// definition of DLTensor (the same layout in every DLPack release since 0.6).
// clang-format off
#include <ATen/DLConvertor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "capi/context.h"
#include "capi/reducer.h"
#include "capi/status.h"
#include "core/comm/cuda/cuda_support.h"
#include "core/comm/process_group.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn_dlpack.h"
// clang-format on

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;
using ddpspawn::capi::ToReduceOp;

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

}  // namespace

extern "C" {

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_reduce_dlpack(ddpspawn_context* context,
                                                           DLTensor* tensor, int32_t op) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    ASSIGN_OR_RETURN(ddpspawn::ReduceOp reduce_op, ToReduceOp(op));
    ASSIGN_OR_RETURN(at::Tensor view, ViewOf(tensor, "tensor"));
    return context->group->AllReduce(view, reduce_op);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce_dlpack(ddpspawn_context* context, DLTensor* tensor,
                                                       int32_t op, int32_t dst) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    ASSIGN_OR_RETURN(ddpspawn::ReduceOp reduce_op, ToReduceOp(op));
    ASSIGN_OR_RETURN(at::Tensor view, ViewOf(tensor, "tensor"));
    return context->group->Reduce(view, reduce_op, dst);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_broadcast_dlpack(ddpspawn_context* context,
                                                          DLTensor* tensor, int32_t src) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    ASSIGN_OR_RETURN(at::Tensor view, ViewOf(tensor, "tensor"));
    return context->group->Broadcast(view, src);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_gather_dlpack(ddpspawn_context* context,
                                                           const DLTensor* input,
                                                           DLTensor* output) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    ASSIGN_OR_RETURN(at::Tensor in, ViewOf(input, "input"));
    ASSIGN_OR_RETURN(at::Tensor out, ViewOf(output, "output"));
    return context->group->AllGatherInto(in, out);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce_scatter_dlpack(ddpspawn_context* context,
                                                               const DLTensor* input,
                                                               DLTensor* output, int32_t op) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    ASSIGN_OR_RETURN(ddpspawn::ReduceOp reduce_op, ToReduceOp(op));
    ASSIGN_OR_RETURN(at::Tensor in, ViewOf(input, "input"));
    ASSIGN_OR_RETURN(at::Tensor out, ViewOf(output, "output"));
    return context->group->ReduceScatter(in, out, reduce_op);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_create_dlpack(
    ddpspawn_context* context, DLTensor* const* gradients, size_t num_gradients,
    const ddpspawn_reducer_options* options, ddpspawn_reducer** out_reducer) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    RETURN_IF_ERROR(NotNull(out_reducer, "out_reducer"));
    if (num_gradients == 0) {
      return absl::InvalidArgumentError("the reducer needs at least one gradient");
    }
    RETURN_IF_ERROR(NotNull(gradients, "gradients"));
    std::vector<at::Tensor> views;
    for (size_t i = 0; i < num_gradients; ++i) {
      const std::string name = absl::StrCat("gradients[", i, "]");
      ASSIGN_OR_RETURN(at::Tensor view, ViewOf(gradients[i], name.c_str()));
      if (view.numel() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " is empty; every gradient needs elements"));
      }
      views.push_back(std::move(view));
    }
    return ddpspawn::capi::CreateReducer(context, std::move(views), options, out_reducer);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_buffers_in_buckets_dlpack(
    ddpspawn_reducer* reducer, DLManagedTensor** out_buffers, size_t num_buffers) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    RETURN_IF_ERROR(NotNull(out_buffers, "out_buffers"));
    const size_t count = reducer->reducer->gradient_count();
    if (num_buffers != count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "out_buffers has ", num_buffers, " entries; the reducer has ", count, " gradients"));
    }
    ASSIGN_OR_RETURN(std::vector<at::Tensor> slots, reducer->reducer->MoveBuffersIntoBuckets());
    for (size_t i = 0; i < slots.size(); ++i) out_buffers[i] = at::toDLPack(slots[i]);
    return absl::OkStatus();
  });
}

}  // extern "C"
