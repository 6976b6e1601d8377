// The C ABI's collectives and reducer on borrowed DLPack tensors (ddpspawn_dlpack.h): each DLTensor
// is checked and viewed without a copy (dlpack_view.h), and handed to the process group's tensor
// collectives or the reducer.
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
#include "capi/dlpack_view.h"
#include "capi/reducer.h"
#include "capi/status.h"
#include "core/comm/process_group.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn_dlpack.h"
// clang-format on

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;
using ddpspawn::capi::ToReduceOp;
using ddpspawn::capi::ViewOf;

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
