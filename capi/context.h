// The C ABI's worker context: a joined process group and the cluster environment it came from.
// Shared by the context and reducer entry points.
#ifndef DDPSPAWN_CAPI_CONTEXT_H_
#define DDPSPAWN_CAPI_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "ddpspawn/ddpspawn.h"

// Ownership: the group is shared with every reducer made from the context, so destroying the
// context before its reducers is safe (the group goes when the last of them does). Thread-safety:
// not thread-safe; calls on one context must not overlap (ddpspawn.h), and its group's collectives,
// its reducers' included, are issued from one thread at a time.
struct ddpspawn_context {
  std::shared_ptr<ddpspawn::ProcessGroup> group;
  std::string environment;
  std::string straggler_summary;  // ddpspawn_context_straggler's last
};

namespace ddpspawn::capi {

// DDPSPAWN_SUM, ... as a ReduceOp; anything else is InvalidArgument.
absl::StatusOr<ReduceOp> ToReduceOp(int32_t op);

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_CONTEXT_H_
