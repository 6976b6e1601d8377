// The gradient reducer behind DistributedDataParallel, written on the public c10d ProcessGroup API:
// gradients are grouped into buckets (reverse registration order, up to a size cap), a bucket is
// handed to the communication hook as soon as all its gradients are ready, strictly in bucket order
// on every rank, and Finalize() waits, averages and writes the gradients back.
//
// Two ways to feed it:
// - autograd: InstallAutogradHooks() hooks each parameter's gradient accumulator, and the finalize
//   step runs as a callback at the end of backward();
// - manual: the caller writes gradient buffers and calls MarkReady(i) and Finalize() itself (the C
//   ABI's reducer, for frameworks that are not LibTorch).
#ifndef DDPSPAWN_CORE_DDP_REDUCER_H_
#define DDPSPAWN_CORE_DDP_REDUCER_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/row_shards.h"
#include "core/util/option_defaults.h"

namespace ddpspawn {

struct ReducerOptions {
  double bucket_cap_mb = DDPSPAWN_DEFAULT_BUCKET_CAP_MB;
  // A small first bucket starts communication early.
  double first_bucket_cap_mb = DDPSPAWN_DEFAULT_FIRST_BUCKET_CAP_MB;
  // Parameters that no rank used in an iteration keep their gradient untouched (undefined stays
  // undefined), as in PyTorch; costs one small all-reduce per iteration. Without it, such a
  // parameter still never hangs the ranks, but gets a zero gradient.
  bool find_unused_parameters = false;
  // PyTorch's static_graph: every iteration uses the same parameters. With or without
  // find_unused_parameters (as in PyTorch), the first synchronized iteration learns which
  // parameters some rank uses (one small all-reduce) and later ones reuse that: those no rank used
  // keep their gradient untouched, with no all-reduce; a rank that later uses a parameter no rank
  // used then gets an error naming it. (Buckets keep their reverse registration order: unlike
  // PyTorch's, they are not rebuilt from the observed gradient order.)
  bool static_graph = false;
  // Gradients live in the bucket buffers: no copy in or out (on by default, unlike PyTorch: the
  // copies cost ~12% of an MLP step here, docs/ddp.md). They alias the buffer without being
  // autograd views, so Optimizer::zero_grad works; a .grad replaced by another tensor is copied in
  // once and aliased again. Manual mode (caller buffers) needs it off.
  bool gradient_as_bucket_view = true;
  std::shared_ptr<CommHook> comm_hook;  // null: MakeAllReduceHook()
  // ZeRO-2 (FSDP's shard_grad_op): each bucket is reduce-scattered (mean) instead of all-reduced,
  // and each rank keeps only its rows of every gradient (row_shards.h): after a synchronized
  // backward every parameter's .grad is undefined (freed as its bucket is packed), and
  // shard_parameters()[i].grad() holds parameter i's averaged rows. The bucket buffers live only
  // from a bucket's first gradient to its reduce-scatter. Autograd mode only, float32 or float64
  // parameters, the default (all-reduce) hook; gradient_as_bucket_view does not apply.
  bool shard_gradients = false;
  // The buckets themselves, instead of the caps: tensor indices per bucket, in the order the
  // buckets are expected to be ready in backward (they are reduced in this order); every tensor in
  // exactly one, one dtype per bucket. full_shard gives one bucket per unit (FSDP2's reduce-scatter
  // per unit), so that no more than one unit's full gradients wait. Empty: AssignBuckets().
  std::vector<std::vector<size_t>> buckets;
};

// Groups tensors into buckets: reverse order, one dtype per bucket, the first closed at
// `first_cap_bytes` and the rest at `cap_bytes`; a tensor larger than the cap gets its own. Returns
// tensor indices per bucket, in the order the buckets become ready in backward.
std::vector<std::vector<size_t>> AssignBuckets(const std::vector<at::Tensor>& tensors,
                                               size_t first_cap_bytes, size_t cap_bytes);

// Thread safety: MarkReady(), Finalize(), set_sync_enabled(), sync_enabled() and TakeLaunchLog()
// may be called from any thread, concurrently (autograd runs the gradient hooks on its own
// threads); one mutex orders them, and a call never re-enters the reducer while holding it.
// Create() and InstallAutogradHooks() run before any of them, on one thread. The bucket layout
// (bucket_count(), bucket_members()) is fixed at creation.
//
// Ownership: the reducer does not own `group`, which must outlive it. In autograd mode the hooks it
// installs on the parameters' gradient accumulators capture the reducer: it must outlive every
// backward() of those parameters (DistributedDataParallel owns it next to the parameters). The
// communication hook is shared, and captures nothing of the reducer.
class Reducer {
 public:
  // `tensors`: in autograd mode the parameters (their .grad() is reduced); in manual mode the
  // gradient buffers themselves. All must be dense, contiguous, and on the group's device.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(ProcessGroup* group,
                                                         std::vector<at::Tensor> tensors,
                                                         ReducerOptions options,
                                                         bool autograd_mode);
  ~Reducer();

  // Hooks every parameter's gradient accumulator (autograd mode only).
  absl::Status InstallAutogradHooks();

  // Gradient `index` is final for this iteration: copy it into its bucket and start every bucket
  // that is now complete, in order.
  absl::Status MarkReady(size_t index);

  // Starts the buckets still waiting (their unused gradients count as zero), waits for every
  // bucket, and writes the averaged gradients back.
  absl::Status Finalize();

  // Uneven inputs: one iteration's collectives with every gradient zero, for a rank that has no
  // batch while others train (DistributedDataParallel:: ShadowIteration).
  absl::Status ShadowIteration();
  // Uneven inputs: a rank without a batch counts the iteration as the others' backward pass (a
  // no_sync one, unless ShadowIteration() follows), so that its shadow's collectives carry as many
  // backward passes as theirs.
  void NoteJoinedPass();
  // Multiplies the averaged gradients of the next iterations (1: the plain mean over the ranks).
  void set_gradient_scale(double scale);

  // no_sync: while disabled, gradients accumulate locally and nothing is communicated.
  void set_sync_enabled(bool enabled);
  bool sync_enabled() const;

  // Autograd mode: called when the first gradient of a synchronized backward arrives, before any of
  // its collectives; an error fails that backward (DistributedDataParallel checks that its forward
  // ran). It runs under the reducer's lock and must not call the reducer. Set before training.
  void set_backward_check(std::function<absl::Status()> check) {
    backward_check_ = std::move(check);
  }

  // Whether the last Finalize() wrote gradient `index`: false under no_sync, before the first
  // Finalize(), and, with find_unused_parameters or static_graph, for a gradient that no rank used
  // (left untouched). A caller that keeps gradients of its own (the C ABI's) needs it for gradients
  // that this rank did not use but another one did. An index out of range is an error.
  absl::StatusOr<bool> WrittenByLastFinalize(size_t index) const;

  // Manual mode's gradient_as_bucket_view: copies each caller's buffer into its slot in its bucket
  // once and from then on reduces the slots, which it returns (shaped like the buffers; shared
  // memory between a launcher's ranks; each keeps its memory alive). The caller writes each
  // gradient into its slot, and neither MarkReady nor Finalize copies anything; the caller's own
  // buffers are not used again. Between iterations only; refused in autograd mode and with
  // find_unused_parameters (a buffer no rank marked is zeroed in its slot, where it should stay
  // untouched).
  absl::StatusOr<std::vector<at::Tensor>> MoveBuffersIntoBuckets();

  size_t gradient_count() const { return tensors_.size(); }   // fixed at creation
  const ReducerOptions& options() const { return options_; }  // fixed at creation
  // The tensors it reduces (autograd mode: the parameters), as given to Create().
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  // shard_gradients: per parameter, this rank's rows of it (OwnedRows: a leaf tensor sharing the
  // parameter's storage, so updating it in place updates the parameter), whose .grad() each
  // synchronized Finalize() sets to the averaged rows (left undefined for a parameter no rank used,
  // with find_unused_parameters or static_graph). Empty without shard_gradients.
  const std::vector<at::Tensor>& shard_parameters() const { return shard_parameters_; }
  // shard_gradients, before training: each shard parameter becomes a copy of its rows with storage
  // of its own (still a leaf), so that the parameters' storage can be freed (full_shard.h).
  // FailedPrecondition without shard_gradients.
  absl::Status DetachShardParameters();
  // Whether DetachShardParameters() ran: the shard parameters no longer alias the parameters.
  bool shard_parameters_detached() const { return shard_parameters_detached_; }
  size_t bucket_count() const { return buckets_.size(); }
  const std::vector<size_t>& bucket_members(size_t bucket) const {
    return buckets_[bucket].members;
  }
  // Synchronized Finalize()s that succeeded so far (a sharded optimizer checks that its gradients
  // are fresh).
  int64_t synchronized_backwards() const;
  // Bucket indices in the order their reductions started, since the last call.
  std::vector<int> TakeLaunchLog();

 private:
  struct Bucket {
    std::vector<size_t> members;
    at::Tensor buffer;
    std::vector<at::Tensor> views;  // per member, shaped like its tensor
    size_t pending = 0;
    std::unique_ptr<PendingReduction> reduction;
    // shard_gradients: the members' rows per rank (`buffer` holds world sections of it while the
    // bucket fills, and is released by its reduce-scatter) and this rank's averaged section.
    std::unique_ptr<SectionLayout> sections;
    at::Tensor shard;
    std::vector<at::Tensor> shard_views;  // per member, shaped like its rows
  };
  Reducer(ProcessGroup* group, std::vector<at::Tensor> tensors, ReducerOptions options,
          bool autograd_mode);
  absl::Status MarkReadyLocked(size_t index, bool used) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status StartReadyBuckets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status FinalizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  at::Tensor& GradientOf(size_t index);
  // shard_gradients: packs gradient `index` into its bucket's sections (an unused one leaves its
  // zeros) and frees it.
  void PackShardedGradient(size_t index, bool used);
  // shard_gradients: the reduce-scatter of a full bucket, which frees its buffer.
  absl::Status ReduceScatterBucket(size_t bucket_index);
  // shard_gradients: the averaged rows onto shard_parameters_' gradients.
  void WriteGradientShards(const std::vector<float>& globally_used);
  void ResetIteration() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // static_graph: an error when this rank used a parameter that no rank used in the first
  // iteration.
  absl::Status CheckStaticGraph(const std::vector<float>& first_used) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  ProcessGroup* const group_;
  std::vector<at::Tensor> tensors_;
  std::vector<at::Tensor> shard_parameters_;  // shard_gradients only; set before training
  bool shard_parameters_detached_ = false;
  const ReducerOptions options_;
  const bool autograd_mode_;
  // The layout is fixed at creation; each bucket's pending count, reduction and buffer contents
  // change under mutex_.
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // fixed at creation
  mutable absl::Mutex mutex_;
  std::vector<bool> ready_ ABSL_GUARDED_BY(mutex_), used_ ABSL_GUARDED_BY(mutex_);
  std::vector<bool> written_ ABSL_GUARDED_BY(mutex_);  // by the last Finalize()
  size_t next_bucket_ ABSL_GUARDED_BY(mutex_) = 0;
  bool sync_enabled_ ABSL_GUARDED_BY(mutex_) = true;
  bool finalize_queued_ ABSL_GUARDED_BY(mutex_) = false;
  // Backward passes finalized under no_sync since the last synchronized one.
  uint32_t unsynced_passes_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<int> launch_log_ ABSL_GUARDED_BY(mutex_);
  double gradient_scale_ ABSL_GUARDED_BY(mutex_) = 1.0;
  int64_t synchronized_backwards_ ABSL_GUARDED_BY(mutex_) = 0;
  // static_graph: how many ranks used each parameter in the first iteration (empty before it).
  std::vector<float> static_globally_used_ ABSL_GUARDED_BY(mutex_);
  std::function<absl::Status()> backward_check_;  // set before training
  struct Hooks;
  std::unique_ptr<Hooks> hooks_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_REDUCER_H_
