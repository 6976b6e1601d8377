// The C ABI's worker context: a joined process group and the cluster
// environment it came from. Shared by the context and reducer entry points.
#ifndef DDPSPAWN_CAPI_CONTEXT_H_
#define DDPSPAWN_CAPI_CONTEXT_H_

#include <memory>
#include <string>

#include "core/dist/process_group.h"
#include "ddpspawn/ddpspawn.h"

struct ddpspawn_context {
  std::unique_ptr<ddpspawn::ProcessGroup> group;
  std::string environment;
};

#endif  // DDPSPAWN_CAPI_CONTEXT_H_
