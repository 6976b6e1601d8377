// DDPSpawnStrategy's collectives (Lightning's strategy.barrier, broadcast, reduce and all_gather)
// over its process group; each is the identity without one (see ddp_spawn_strategy.h).
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/comm/process_group.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::Status DDPSpawnStrategy::Barrier(absl::string_view name) {
  if (group_ == nullptr) return absl::OkStatus();  // not distributed: nothing to wait for
  return group_->Barrier(name);
}

absl::StatusOr<std::string> DDPSpawnStrategy::Broadcast(absl::string_view bytes, int src) {
  if (group_ == nullptr) return std::string(bytes);
  return group_->BroadcastBytes(bytes, src);
}

absl::StatusOr<at::Tensor> DDPSpawnStrategy::Reduce(const at::Tensor& tensor, ReduceOp op) {
  if (!tensor.defined()) return absl::InvalidArgumentError("Reduce got an undefined tensor");
  at::Tensor reduced = tensor.detach().clone().contiguous();
  if (group_ == nullptr) return reduced;
  RETURN_IF_ERROR(group_->AllReduce(reduced, op));
  return reduced;
}

absl::StatusOr<at::Tensor> DDPSpawnStrategy::AllGather(const at::Tensor& tensor) {
  if (!tensor.defined()) return absl::InvalidArgumentError("AllGather got an undefined tensor");
  if (group_ == nullptr) return tensor.detach().unsqueeze(0);
  // Into one tensor: through this host's shared memory where the group has it (the checkpoints'
  // random generator states, the logged values), else one backend all-gather.
  const at::Tensor input = tensor.detach().contiguous();
  std::vector<int64_t> shape = {world_size()};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor gathered = at::empty(shape, input.options());
  RETURN_IF_ERROR(group_->AllGatherInto(input, gathered));
  return gathered;
}

}  // namespace ddpspawn
