// Borrowed DLPack tensors as at::Tensor views, for the C ABI's calls on DLPack tensors
// (collectives, the reducer, checkpoints): each DLTensor is checked against what ddpspawn_dlpack.h
// accepts and viewed over the caller's memory without a copy (at::fromDLPack with a deleter that
// frees nothing). Includes LibTorch's DLConvertor.h first: its copy of dlpack.h shares the include
// guard of the public header's <dlpack/dlpack.h>, so the library is compiled against one definition
// of DLTensor (the same layout in every DLPack release since 0.6).
#ifndef DDPSPAWN_CAPI_DLPACK_VIEW_H_
#define DDPSPAWN_CAPI_DLPACK_VIEW_H_

// clang-format off
#include <ATen/DLConvertor.h>
// clang-format on

#include "absl/status/statusor.h"

namespace ddpspawn::capi {

// Checks `tensor` (named `name` in errors: its shape, strides, element type, device and data) and
// returns a tensor over its memory, which stays the caller's: the view must not outlive it.
absl::StatusOr<at::Tensor> ViewOf(const DLTensor* tensor, const char* name);

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_DLPACK_VIEW_H_
