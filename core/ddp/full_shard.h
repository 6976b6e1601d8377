// FullShard (ZeRO stage 3, FSDP's full_shard): parameters sharded too. On top of shard_grad_op (the
// reducer's reduce-scatter, a ShardGradOpOptimizer over each rank's rows), each rank keeps only its
// rows of every parameter between steps (row_shards.h: FSDP2's dim-0 shards). The parameters are
// grouped into units, FSDP's wrapped modules; a unit's parameters are all-gathered just before its
// forward and freed after it, gathered again just before its backward, and freed as soon as its
// last gradient is reduced. LibTorch modules have no forward hooks, so the user's forward runs each
// unit through Forward() (or ForwardSequential() for a Sequential's children).
//
// A freed parameter keeps its shape, but its storage holds no bytes: outside a unit's Forward() or
// a GatherAll()/ReshardAll() span, reading it is an error of the caller (as reading FSDP's
// unsharded parameters outside a forward or summon_full_params is).
#ifndef DDPSPAWN_CORE_DDP_FULL_SHARD_H_
#define DDPSPAWN_CORE_DDP_FULL_SHARD_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/row_shards.h"
#include "core/ddp/shard_grad_op_optimizer.h"
#include "core/ddp/unit_order.h"

namespace torch::nn {
class Module;
class SequentialImpl;
}  // namespace torch::nn

namespace ddpspawn {

struct FullShardOptions {
  // The wrapper's options; FullShard sets reducer.shard_gradients itself, and reducer.buckets to
  // one bucket per unit (FSDP2's reduce-scatter per unit: the bucket caps do not apply). Uneven
  // inputs (ActiveRanks) are not supported under full_shard.
  DdpOptions ddp;
  // FSDP2's reshard_after_forward: a unit's parameters are freed after its forward and gathered
  // again for its backward (true), or stay whole from its forward to its backward (false: one
  // all-gather less per unit and step, at the cost of every unit whole between forward and
  // backward).
  bool reshard_after_forward = true;
  // FSDP's prefetch: a unit's all-gather starts before it is needed, while the unit before it runs
  // (in forward, the next unit of the last training forward's order; in backward, the unit that ran
  // before this one in this forward), so that at most two units (and a root unit holding them) are
  // whole at once. Only where the all-gather runs beside the caller (Gloo across hosts, without
  // shared memory, or for a rank's piece above the shared memory's staging capacity, 64 MB; NCCL):
  // through one host's shared memory it is a copy on the calling thread, so starting it early would
  // only hold two units at once for nothing; nor on one rank.
  bool prefetch = true;
};

// Thread safety: one training loop at a time, as DistributedDataParallel; the autograd hooks it
// installs (which may run on autograd's threads) take its mutex. Ownership: owns the
// DistributedDataParallel wrapper; shares the module; borrows the group, which must outlive it. Its
// hooks capture it, so it must outlive every backward() through the module.
class FullShard {
 public:
  // Wraps `module` as DistributedDataParallel does (rank 0's parameters everywhere), keeps this
  // rank's rows of every trainable parameter and frees the rest. `units` are modules under `module`
  // (or `module` itself): a unit holds its parameters that no other unit nested in it holds, as
  // FSDP2's fully_shard does; every trainable parameter must belong to one. InvalidArgument naming
  // the parameter otherwise, and for parameters whose storage is not their own (a view, tied
  // storage): freeing it would free another tensor's data.
  static absl::StatusOr<std::unique_ptr<FullShard>> Wrap(
      std::shared_ptr<torch::nn::Module> module,
      const std::vector<std::shared_ptr<torch::nn::Module>>& units, ProcessGroup* group,
      const FullShardOptions& options = {});
  // The tensor form (a TorchScript module's parameters and buffers, as DistributedDataParallel's):
  // `units` are lists of `parameters`; every one that requires grad must be in one unit. Its
  // forward runs through Forward() only.
  static absl::StatusOr<std::unique_ptr<FullShard>> Wrap(
      std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers,
      const std::vector<std::vector<at::Tensor>>& units, ProcessGroup* group,
      const FullShardOptions& options = {});
  ~FullShard();
  FullShard(const FullShard&) = delete;
  FullShard& operator=(const FullShard&) = delete;

  // Runs `forward` (unit `unit`'s forward, returning its output) with the unit's parameters whole:
  // all-gathers them (a collective: every rank runs the same units in the same order), runs it, and
  // frees them again, unless reshard_after_forward is false while gradients are enabled. With
  // gradients enabled, its output's gradient gathers them again before the unit's backward, and
  // they are freed once its last gradient is reduced. Under no-grad (evaluation) it gathers too:
  // every rank must run as many forwards (or use GatherAll() around an uneven evaluation).
  absl::StatusOr<at::Tensor> Forward(size_t unit, const std::function<at::Tensor()>& forward);
  // `net`'s forward on `input`: each child in order, the children that are units through Forward().
  // When `net` is a unit itself (the root, holding parameters no child unit holds, as
  // SizeBasedUnits() leaves it), the whole pass runs through its Forward() too.
  absl::StatusOr<at::Tensor> ForwardSequential(torch::nn::SequentialImpl& net, at::Tensor input);

  // Every unit whole until the matching ReshardAll() (FSDP's summon_full_params; the calls nest):
  // for reading, saving or loading the parameters, or an evaluation whose ranks run different
  // numbers of batches. GatherAll() is a collective. The last ReshardAll() keeps this rank's rows
  // of what the parameters hold then (FSDP's writeback: a checkpoint loaded into them stays) and
  // frees them; every rank must have written the same values, or the ranks' rows disagree.
  // FailedPrecondition for a ReshardAll() without a GatherAll(). With `only_rank` (FSDP's
  // rank0_only), the units are whole on that rank alone: the others take part in each unit's
  // all-gather and free it at once, so that saving rank 0's weights costs them one unit.
  absl::Status GatherAll(int only_rank = -1);
  absl::Status ReshardAll();

  // ShardGradOpOptimizer::Create over this wrapper: the optimizer steps each rank's rows, which the
  // next forward gathers.
  absl::StatusOr<std::unique_ptr<ShardGradOpOptimizer>> MakeOptimizer(OptimizerFactory make);

  DistributedDataParallel& ddp() { return *ddp_; }
  size_t unit_count() const { return units_.size(); }
  // The index of `module` among the units given to Wrap(), or NotFound.
  absl::StatusOr<size_t> UnitOf(const torch::nn::Module& module) const;
  // Bytes of the sharded parameters that are whole now (every unit's while GatherAll() holds them),
  // and the most that were whole at once since the last reset (FSDP's memory high-water for
  // parameters: with reshard_after_forward, the largest unit's bytes in a step).
  int64_t WholeParameterBytes() const;
  // Gathers started ahead of their unit (prefetch) so far, in forwards and in backwards.
  struct PrefetchCounts {
    int64_t forward = 0;
    int64_t backward = 0;
  };
  PrefetchCounts prefetched_gathers() const;
  int64_t peak_whole_parameter_bytes() const;
  void ResetPeakWholeParameterBytes();

 private:
  struct Unit {
    const torch::nn::Module* module = nullptr;
    std::vector<at::Tensor> parameters;  // variable_data() aliases: writes keep autograd's versions
    std::vector<at::Tensor> shapes;      // meta tensors shaped like them (their rows never freed)
    std::vector<at::Tensor> shards;      // the reducer's detached rows of each
    std::vector<size_t> gradient_indices;  // of each parameter, in the reducer's tensors()
    std::unique_ptr<SectionLayout> layout;
    bool whole = false;
    // A gather started ahead (prefetch), with its input and output, until FinishGather().
    std::unique_ptr<PendingWork> arriving;
    at::Tensor sent, received;
    bool backward_started = false;  // in this backward: BeforeBackward() ran
    int64_t bytes = 0;              // of its parameters, whole
    int awaiting_gradients = 0;     // in a backward: this unit's gradients not yet accumulated
  };
  // What the two Wrap()s decide: the parameters the wrapper will reduce (in its order), each one's
  // unit and name, and the units' modules (null in the tensor form).
  struct Plan {
    std::vector<at::Tensor> trainable;
    std::vector<size_t> owner;
    std::vector<std::string> names;
    std::vector<const torch::nn::Module*> unit_modules;
  };
  FullShard() = default;
  // Checks the plan, wraps with `wrap` (given the reducer's options: one bucket per unit), and
  // frees every unit.
  static absl::StatusOr<std::unique_ptr<FullShard>> Build(
      Plan plan,
      const std::function<
          absl::StatusOr<std::unique_ptr<DistributedDataParallel>>(const DdpOptions&)>& wrap,
      ProcessGroup* group, const FullShardOptions& options);
  absl::Status InstallHooks();
  // ForwardSequential's pass over the children.
  absl::StatusOr<at::Tensor> ForwardChildren(torch::nn::SequentialImpl& net, at::Tensor input);
  // Gather() is StartGather() then FinishGather(): the unit's rows all-gathered into its
  // parameters' storage. Counted as whole from the start (its bytes are allocated then).
  absl::Status Gather(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status StartGather(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status FinishGather(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Starts unit `next`'s gather ahead when prefetch applies to it (kNoUnit: none).
  absl::Status Prefetch(size_t next, bool in_backward) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends a gather started ahead that no unit used (a wrong guess, or one left when backward or the
  // wrapper ends): waits for it (a collective every rank started) and frees its buffers. Its
  // failure is kept for the next Forward() or GatherAll() to return.
  void DiscardGather(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The kept failure of a discarded gather (then forgotten), or OK.
  absl::Status TakeDeferredError() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Reshard(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The unit to prefetch when `unit`'s backward begins: the one before it in this forward, unless
  // its backward began already.
  size_t BackwardPrefetchTarget(size_t unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Autograd's side: the unit's output gradient arrived (its backward is next), and one of its
  // parameters' gradient was accumulated.
  void BeforeBackward(size_t unit);
  void AfterGradient(size_t unit);

  std::shared_ptr<torch::nn::Module> module_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  ProcessGroup* group_ = nullptr;
  FullShardOptions options_;
  mutable absl::Mutex mutex_;
  std::vector<Unit> units_ ABSL_GUARDED_BY(mutex_);
  // GatherAll()s not yet matched by ReshardAll(), latest last: whether each made the units whole on
  // this rank; all_pinned_ counts those that did.
  std::vector<bool> pins_ ABSL_GUARDED_BY(mutex_);
  int all_pinned_ ABSL_GUARDED_BY(mutex_) = 0;
  bool end_of_backward_queued_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t whole_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t peak_whole_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  // The units' forward order, for prefetch; how many units' Forward()s are running now.
  UnitOrder order_ ABSL_GUARDED_BY(mutex_){0};
  int forwards_running_ ABSL_GUARDED_BY(mutex_) = 0;
  PrefetchCounts prefetched_ ABSL_GUARDED_BY(mutex_);
  absl::Status deferred_error_ ABSL_GUARDED_BY(mutex_);
  struct Hooks;
  std::unique_ptr<Hooks> hooks_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_FULL_SHARD_H_
