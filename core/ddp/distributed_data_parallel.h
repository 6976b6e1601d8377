// DistributedDataParallel for LibTorch modules: replicas start identical (parameters and buffers
// broadcast from rank 0 at wrap time), buffers follow rank 0 before each forward
// (broadcast_buffers), and gradients are averaged across ranks by the bucketed Reducer during
// backward. Works on a torch::nn::Module or on plain lists of parameters and buffers (e.g. a
// TorchScript module's).
#ifndef DDPSPAWN_CORE_DDP_DISTRIBUTED_DATA_PARALLEL_H_
#define DDPSPAWN_CORE_DDP_DISTRIBUTED_DATA_PARALLEL_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/reducer.h"
#include "core/ddp/wrap_registry.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ddpspawn {

struct DdpOptions {
  ReducerOptions reducer;
  bool broadcast_buffers = true;
  // Uneven inputs (ActiveRanks): true, as PyTorch's Join, averages each iteration's gradients over
  // every rank, a joined one counting zeros; false averages over the ranks that still have a batch.
  bool divide_by_initial_world_size = true;
};

// Thread safety: one training loop at a time (forward, backward and no_sync from one thread;
// autograd's own threads run the reducer's hooks, which it guards). Ownership: does not own the
// group, which must outlive it; owns the reducer whose autograd hooks capture it, so it must
// outlive every backward() through the parameters it wraps.
class DistributedDataParallel {
 public:
  // Broadcasts parameters and buffers from rank 0, then hooks the parameters that require grad. The
  // module's SyncBatchNorm layers normalize over `group`. The by-reference form borrows a module
  // held by value, which must outlive the wrapper (module() is then null).
  //
  // A module form refuses (FailedPrecondition, naming the fix) what would silently break the sync:
  // a module that another live wrapper already wraps (or holds a part of), and a BatchNorm layer
  // when the group's strategy has sync_batchnorm (GroupWrapRules). Its PrepareForward() then
  // refuses a module whose parameters changed after wrapping (one added, removed or replaced, or
  // moved to another device or dtype), and follows its buffers: one registered after wrapping is
  // broadcast from rank 0 with the rest.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Wrap(
      std::shared_ptr<torch::nn::Module> module, ProcessGroup* group,
      const DdpOptions& options = {});
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Wrap(
      torch::nn::Module& module, ProcessGroup* group, const DdpOptions& options = {});
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Wrap(
      std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers, ProcessGroup* group,
      const DdpOptions& options = {});

  // What torch's DDP forward does before the module's: with broadcast_buffers and gradients
  // enabled, every rank takes rank 0's buffers. Under no-grad (evaluation) it does nothing, as
  // torch's: evaluation shards may differ in length, so a collective there could meet no partner.
  // DdpModule's forward (ddp_module.h) calls it; a loop that calls the module itself calls it
  // before each forward. When it has buffers to broadcast and a synchronized backward starts
  // without it since the last one, that backward fails on every rank with an error that says so,
  // rather than letting the buffers (BatchNorm's running statistics) drift apart across ranks.
  absl::Status PrepareForward();

  // While the returned guard lives, backward accumulates gradients locally (no communication); the
  // first backward after it ends averages everything accumulated. `enabled` false gives a guard
  // that changes nothing, so that a conditional no_sync is one line (`auto local =
  // ddp.no_sync(skip_sync);`); the guard's end restores the setting it found. It borrows the
  // reducer, which must outlive it; made and ended on the training thread, as no_sync() is.
  class NoSync {
   public:
    explicit NoSync(Reducer* reducer, bool enabled = true)
        : reducer_(enabled ? reducer : nullptr),
          previous_(reducer_ != nullptr && reducer_->sync_enabled()) {
      if (reducer_ != nullptr) reducer_->set_sync_enabled(false);
    }
    ~NoSync() {
      if (reducer_ != nullptr) reducer_->set_sync_enabled(previous_);
    }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    Reducer* reducer_;  // null: a guard that does nothing
    bool previous_;
  };
  NoSync no_sync(bool enabled = true) { return NoSync(reducer_.get(), enabled); }

  // Uneven inputs (PyTorch's Join): ranks with different numbers of batches. Every rank calls
  // ActiveRanks(has_batch) before each iteration, and gets how many ranks still have a batch. A
  // rank with a batch trains as usual; one without calls ShadowIteration() instead, which runs the
  // collectives of one backward with zero gradients, so that the others never wait for it. When it
  // returns 0, every rank is done, and every rank has taken the parameters and buffers of the rank
  // that trained longest (its optimizer stepped every iteration; the others' optimizer state stays
  // behind). Not with SyncBatchNorm layers while ranks are uneven (their forward collectives cannot
  // be shadowed). Buffers keep following rank 0, joined or not.
  absl::StatusOr<int> ActiveRanks(bool has_batch);
  absl::Status ShadowIteration();

  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  Reducer& reducer() { return *reducer_; }
  ProcessGroup& group() { return *group_; }

 private:
  DistributedDataParallel() = default;
  absl::Status BroadcastCoalesced(const std::vector<at::Tensor>& tensors, int root = 0);
  // The module form: its module must still have the parameters it was wrapped with, on their
  // devices and dtypes; buffers_ becomes its buffers now.
  absl::Status FollowModule();
  // Whether PrepareForward() has a collective to run (then it is required).
  bool ForwardNeedsPreparing() const;
  // The reducer's backward check: PrepareForward() ran since the last one.
  absl::Status TakePreparedForward();
  // When every rank has joined: the parameters and buffers of the rank with the most iterations
  // (the highest such rank), everywhere.
  absl::Status SyncFinalModel();

  std::shared_ptr<torch::nn::Module> module_;
  // The module form's module (borrowed or module_), checked by FollowModule(); null for the tensor
  // form.
  const torch::nn::Module* watched_ = nullptr;
  std::vector<std::pair<c10::Device, at::ScalarType>> layout_;  // of parameters_
  WrapClaim claim_;  // the module form's: the module is wrapped while this lives
  ProcessGroup* group_ = nullptr;
  DdpOptions options_;
  std::vector<at::Tensor> parameters_, buffers_;
  std::unique_ptr<Reducer> reducer_;
  int64_t iterations_ = 0;  // ActiveRanks calls with a batch
  bool has_sync_batch_norm_ = false;
  // Set by PrepareForward() with gradients enabled, taken by the reducer's backward check on
  // autograd's thread.
  std::atomic<bool> forward_prepared_{false};
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_DISTRIBUTED_DATA_PARALLEL_H_
