// DistributedDataParallel (see distributed_data_parallel.h).
#include "core/ddp/distributed_data_parallel.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ddp/sync_batch_norm.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Wrap(
    std::shared_ptr<torch::nn::Module> module, ProcessGroup* group, const DdpOptions& options) {
  if (module == nullptr) return absl::InvalidArgumentError("the module must not be null");
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp = Wrap(*module, group, options);
  if (ddp.ok()) (*ddp)->module_ = std::move(module);
  return ddp;
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Wrap(
    torch::nn::Module& module, ProcessGroup* group, const DdpOptions& options) {
  // Refusals come before the first collective, and every rank reaches the same one: the ranks hold
  // the same model.
  if (group != nullptr && GroupWrapRulesOf(group).sync_batchnorm) {
    if (std::string layer = FirstBatchNormName(module); !layer.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", group->rank(), ": the strategy has sync_batchnorm, and BatchNorm '", layer,
          "' would normalize each rank's batch alone: wrap with Distribute(model, strategy), "
          "which converts the BatchNorm layers first, or ConvertSyncBatchNorm before wrapping"));
    }
  }
  RETURN_IF_ERROR(CheckNotWrapped(module));
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      Wrap(module.parameters(), module.buffers(), group, options);
  if (!ddp.ok()) return ddp;
  RETURN_IF_ERROR(WrapClaim::Make(module, (*ddp)->claim_));
  (*ddp)->watched_ = &module;
  for (const at::Tensor& t : (*ddp)->parameters_) {
    (*ddp)->layout_.emplace_back(t.device(), t.scalar_type());
  }
  // Every SyncBatchNorm normalizes over this group's ranks (children only: a module held by value
  // cannot hand out a shared pointer to itself).
  std::vector<SyncBatchNormImpl*> layers;
  if (auto* self = dynamic_cast<SyncBatchNormImpl*>(&module)) layers.push_back(self);
  for (const std::shared_ptr<torch::nn::Module>& child : module.modules(/*include_self=*/false)) {
    if (auto* sync = dynamic_cast<SyncBatchNormImpl*>(child.get())) layers.push_back(sync);
  }
  for (SyncBatchNormImpl* sync : layers) {
    sync->set_process_group(group);
    (*ddp)->has_sync_batch_norm_ = true;
  }
  return ddp;
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Wrap(
    std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers, ProcessGroup* group,
    const DdpOptions& options) {
  if (group == nullptr) return absl::InvalidArgumentError("DDP needs a process group");
  std::unique_ptr<DistributedDataParallel> ddp(new DistributedDataParallel());
  ddp->group_ = group;
  ddp->options_ = options;
  ddp->buffers_ = std::move(buffers);
  std::vector<at::Tensor> trainable;
  for (const at::Tensor& p : parameters) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  ddp->parameters_ = std::move(parameters);
  // Every replica starts from rank 0's state.
  RETURN_IF_ERROR(ddp->BroadcastCoalesced(ddp->parameters_));
  RETURN_IF_ERROR(ddp->BroadcastCoalesced(ddp->buffers_));
  absl::StatusOr<std::unique_ptr<Reducer>> reducer =
      Reducer::Create(group, std::move(trainable), options.reducer, /*autograd_mode=*/true);
  if (!reducer.ok()) return reducer.status();
  ddp->reducer_ = *std::move(reducer);
  DistributedDataParallel* checked = ddp.get();  // owns the reducer: outlives the check
  ddp->reducer_->set_backward_check([checked] { return checked->TakePreparedForward(); });
  RETURN_IF_ERROR(ddp->reducer_->InstallAutogradHooks());
  return ddp;
}

bool DistributedDataParallel::ForwardNeedsPreparing() const {
  return options_.broadcast_buffers && group_->world_size() > 1 &&
         std::any_of(buffers_.begin(), buffers_.end(),
                     [](const at::Tensor& b) { return b.defined() && b.numel() > 0; });
}

absl::Status DistributedDataParallel::FollowModule() {
  if (watched_ == nullptr) return absl::OkStatus();
  const std::vector<at::Tensor> parameters = watched_->parameters();
  const auto fix = [this](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", group_->rank(), ": ", what,
                     " after Distribute, so the wrapper would leave it out of the gradient "
                     "averaging and the ranks would drift apart; make every change to the "
                     "model's parameters (ConvertSyncBatchNorm, new layers, to(device or dtype)) "
                     "before Distribute"));
  };
  if (parameters.size() != parameters_.size()) {
    return fix(absl::StrCat("the module has ", parameters.size(), " parameters now, ",
                            parameters_.size(), " when wrapped: one was added or removed"));
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    const at::Tensor& tensor = parameters[i];
    const auto& [device, dtype] = layout_[i];
    const bool replaced = !tensor.is_same(parameters_[i]);
    if (!replaced && tensor.device() == device && tensor.scalar_type() == dtype) continue;
    const std::string name =
        absl::StrCat("parameter '", watched_->named_parameters().keys()[i], "'");
    if (replaced) return fix(absl::StrCat(name, " was replaced"));
    return fix(absl::StrCat(name, " moved from ", device.str(), " ", c10::toString(dtype), " to ",
                            tensor.device().str(), " ", c10::toString(tensor.scalar_type())));
  }
  // Buffers are followed, not refused: one registered after wrapping (a cache a forward adds) is
  // broadcast from rank 0 with the rest. Ranks whose buffers differ then call different broadcasts,
  // which the group refuses, naming both.
  std::vector<at::Tensor> buffers = watched_->buffers();
  const bool same =
      buffers.size() == buffers_.size() &&
      std::equal(buffers.begin(), buffers.end(), buffers_.begin(),
                 [](const at::Tensor& a, const at::Tensor& b) { return a.is_same(b); });
  if (!same) buffers_ = std::move(buffers);
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::PrepareForward() {
  if (!c10::GradMode::is_enabled()) return absl::OkStatus();
  RETURN_IF_ERROR(FollowModule());
  if (!ForwardNeedsPreparing()) return absl::OkStatus();
  RETURN_IF_ERROR(BroadcastCoalesced(buffers_));
  forward_prepared_.store(true);
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::TakePreparedForward() {
  if (!ForwardNeedsPreparing() || forward_prepared_.exchange(false)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", group_->rank(),
      ": a backward through DistributedDataParallel started without its forward: call "
      "PrepareForward() before each forward of the module (DdpModule's forward does), or "
      "every rank keeps its own buffers (BatchNorm's running statistics) instead of rank 0's"));
}

absl::StatusOr<int> DistributedDataParallel::ActiveRanks(bool has_batch) {
  if (reducer_->shard_parameters_detached()) {  // before the collective: every rank refuses
    return absl::UnimplementedError(
        "uneven inputs (ActiveRanks) under full_shard: a joined rank cannot take part in the "
        "units' gathers, and its parameters are sharded; give every rank as many batches (a "
        "DistributedSampler pads the shards)");
  }
  float active = has_batch ? 1.0F : 0.0F;  // a float sum takes shared memory
  RETURN_IF_ERROR(group_->AllReduce(&active, 1, DType::kFloat32, ReduceOp::kSum));
  const int count = static_cast<int>(active);
  if (count == 0) {
    reducer_->set_gradient_scale(1.0);
    RETURN_IF_ERROR(SyncFinalModel());
    return 0;
  }
  if (count < group_->world_size() && has_sync_batch_norm_) {
    return absl::UnimplementedError(absl::StrCat(
        "uneven inputs (", group_->world_size() - count,
        " ranks have no batch left) with SyncBatchNorm: its forward collectives cannot be "
        "shadowed; give every rank as many batches"));
  }
  if (has_batch) ++iterations_;
  if (!has_batch) reducer_->NoteJoinedPass();
  reducer_->set_gradient_scale(options_.divide_by_initial_world_size
                                   ? 1.0
                                   : static_cast<double>(group_->world_size()) / count);
  return count;
}

absl::Status DistributedDataParallel::ShadowIteration() {
  RETURN_IF_ERROR(PrepareForward());  // the active ranks' buffer broadcast
  forward_prepared_.store(false);     // no backward of this rank takes it
  return reducer_->ShadowIteration();
}

absl::Status DistributedDataParallel::SyncFinalModel() {
  // The rank with the most iterations, the highest among equals: one max.
  double key = static_cast<double>(iterations_) * group_->world_size() + group_->rank();
  RETURN_IF_ERROR(group_->AllReduce(&key, 1, DType::kFloat64, ReduceOp::kMax));
  const int last = static_cast<int>(static_cast<int64_t>(key) % group_->world_size());
  iterations_ = 0;
  RETURN_IF_ERROR(BroadcastCoalesced(parameters_, last));
  return BroadcastCoalesced(buffers_, last);
}

// One broadcast per dtype: the tensors are flattened into one buffer, broadcast, and copied back.
absl::Status DistributedDataParallel::BroadcastCoalesced(const std::vector<at::Tensor>& tensors,
                                                         int root) {
  if (group_->world_size() == 1) return absl::OkStatus();
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) by_dtype[t.scalar_type()].push_back(t);
  }
  c10::NoGradGuard no_grad;
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat_parts;
    for (const at::Tensor& t : group) flat_parts.push_back(t.detach().reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    RETURN_IF_ERROR(group_->Broadcast(flat, root));
    int64_t offset = 0;
    for (const at::Tensor& t : group) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
