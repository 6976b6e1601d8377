// The C ABI's gradient reducer handle, shared by the flat-buffer entry points (reducer_api.cc) and
// the DLPack ones (dlpack_api.cc).
#ifndef DDPSPAWN_CAPI_REDUCER_H_
#define DDPSPAWN_CAPI_REDUCER_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/reducer.h"
#include "ddpspawn/ddpspawn.h"

namespace at {
class Tensor;
}  // namespace at

// Ownership: keeps its context's group alive (declared first, so it is released after the reducer
// that uses it) and, with the powersgd hook, that hook's state (read by
// ddpspawn_reducer_compression between iterations). Thread-safety: not thread-safe; calls on one
// reducer must not overlap (ddpspawn.h), nor its all-reduces the collectives of its context (they
// share one group).
struct ddpspawn_reducer {
  std::shared_ptr<ddpspawn::ProcessGroup> group;
  std::unique_ptr<ddpspawn::Reducer> reducer;
  std::shared_ptr<ddpspawn::PowerSgdState> powersgd;
};

namespace ddpspawn::capi {

// A reducer over `gradients` (views of the caller's memory, which must outlive it) with the
// caller's options (NULL: the defaults), into *out_reducer.
absl::Status CreateReducer(ddpspawn_context* context, std::vector<at::Tensor> gradients,
                           const ddpspawn_reducer_options* options, ddpspawn_reducer** out_reducer);

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_REDUCER_H_
