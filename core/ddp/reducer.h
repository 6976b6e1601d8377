// The gradient reducer behind DistributedDataParallel, written on the public c10d ProcessGroup
// API: gradients are grouped into buckets (reverse registration order, up to a size cap), a bucket
// is handed to the communication hook as soon as all its gradients are ready, strictly in bucket
// order on every rank, and Finalize() waits, averages and writes the gradients back.
//
// Two ways to feed it:
// - autograd: InstallAutogradHooks() hooks each parameter's gradient accumulator, and the
//   finalize step runs as a callback at the end of backward();
// - manual: the caller writes gradient buffers and calls MarkReady(i) and Finalize() itself
//   (the C ABI's reducer, for frameworks that are not LibTorch).
#ifndef DDPSPAWN_CORE_DDP_REDUCER_H_
#define DDPSPAWN_CORE_DDP_REDUCER_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"

namespace ddpspawn {

struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;  // a small first bucket starts communication early
  // Parameters that no rank used in an iteration keep their gradient untouched
  // (undefined stays undefined), as in PyTorch; costs one small all-reduce per
  // iteration. Without it, such a parameter still never hangs the ranks, but
  // gets a zero gradient.
  bool find_unused_parameters = false;
  // Gradients live in the bucket buffers: no copy in or out (on by default,
  // unlike PyTorch: the copies cost ~12% of an MLP step here, docs/ddp.md).
  // They alias the buffer without being autograd views, so Optimizer::zero_grad
  // works; a .grad replaced by another tensor is copied in once and aliased
  // again. Manual mode (caller buffers) needs it off.
  bool gradient_as_bucket_view = true;
  std::shared_ptr<CommHook> comm_hook;  // null: MakeAllReduceHook()
};

// Groups tensors into buckets: reverse order, one dtype per bucket, the first
// closed at `first_cap_bytes` and the rest at `cap_bytes`; a tensor larger than
// the cap gets its own. Returns tensor indices per bucket, in the order the
// buckets become ready in backward.
std::vector<std::vector<size_t>> AssignBuckets(const std::vector<at::Tensor>& tensors,
                                               size_t first_cap_bytes, size_t cap_bytes);

class Reducer {
 public:
  // `tensors`: in autograd mode the parameters (their .grad() is reduced); in
  // manual mode the gradient buffers themselves. All must be dense, contiguous,
  // and on the group's device.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(ProcessGroup* group,
                                                         std::vector<at::Tensor> tensors,
                                                         ReducerOptions options,
                                                         bool autograd_mode);
  ~Reducer();

  // Hooks every parameter's gradient accumulator (autograd mode only).
  absl::Status InstallAutogradHooks();

  // Gradient `index` is final for this iteration: copy it into its bucket and
  // start every bucket that is now complete, in order.
  absl::Status MarkReady(size_t index);

  // Starts the buckets still waiting (their unused gradients count as zero),
  // waits for every bucket, and writes the averaged gradients back.
  absl::Status Finalize();

  // no_sync: while disabled, gradients accumulate locally and nothing is
  // communicated.
  void set_sync_enabled(bool enabled);
  bool sync_enabled() const { return sync_enabled_; }

  size_t bucket_count() const { return buckets_.size(); }
  const std::vector<size_t>& bucket_members(size_t bucket) const {
    return buckets_[bucket].members;
  }
  // Bucket indices in the order their reductions started, since the last call.
  std::vector<int> TakeLaunchLog();

 private:
  struct Bucket {
    std::vector<size_t> members;
    at::Tensor buffer;
    std::vector<at::Tensor> views;  // per member, shaped like its tensor
    size_t pending = 0;
    std::unique_ptr<PendingReduction> reduction;
  };
  Reducer(ProcessGroup* group, std::vector<at::Tensor> tensors, ReducerOptions options,
          bool autograd_mode);
  absl::Status MarkReadyLocked(size_t index, bool used);
  absl::Status StartReadyBuckets();
  absl::Status FinalizeLocked();
  at::Tensor& GradientOf(size_t index);
  void ResetIteration();

  ProcessGroup* group_;
  std::vector<at::Tensor> tensors_;
  ReducerOptions options_;
  bool autograd_mode_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;
  std::vector<bool> ready_, used_;
  size_t next_bucket_ = 0;
  bool sync_enabled_ = true;
  bool finalize_queued_ = false;
  std::vector<int> launch_log_;
  std::recursive_mutex mutex_;
  struct Hooks;
  std::unique_ptr<Hooks> hooks_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_REDUCER_H_
