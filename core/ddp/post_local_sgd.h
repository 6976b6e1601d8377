// Post-local SGD (Lin et al., "Don't Use Large Mini-Batches, Use Local SGD"; torch's
// post_localSGD_hook, PeriodicModelAverager and Lightning's model_averaging_period): DDP's plain
// gradient all-reduce for the first iterations, then local steps (each rank's own gradients, or
// their mean within each node) with the parameters averaged over every rank every few optimizer
// steps. On a job of several nodes this is hierarchical: the node's ranks average gradients every
// step through shared memory, the nodes average parameters every period.
#ifndef DDPSPAWN_CORE_DDP_POST_LOCAL_SGD_H_
#define DDPSPAWN_CORE_DDP_POST_LOCAL_SGD_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"

namespace ddpspawn {

// torch's PeriodicModelAverager: after each optimizer step, call AverageParameters(); from step
// `warmup_steps` on, every `period`-th call replaces every rank's parameters with their mean over
// the group. Thread-compatible: one thread drives it, as a training loop does; every rank calls it
// the same number of times with the same parameter shapes. Ownership: borrows the group, which must
// outlive it.
class PeriodicModelAverager {
 public:
  // InvalidArgument for a period < 1 or warmup_steps < 0.
  static absl::StatusOr<std::unique_ptr<PeriodicModelAverager>> Create(ProcessGroup* group,
                                                                       int64_t period,
                                                                       int64_t warmup_steps);
  // One call per optimizer step; averages `parameters` (in place, as one flat all-reduce of a
  // buffer kept between calls) when this step is due, and counts the step either way. A collective
  // when due, with the same parameter shapes on every rank. torch averages only parameters with a
  // gradient: pass those. InvalidArgument for parameters of several dtypes or devices.
  absl::Status AverageParameters(const std::vector<at::Tensor>& parameters);
  // Steps seen so far (torch's averager.step); set it to continue a run.
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // How many calls averaged.
  int64_t averaged() const { return averaged_; }

 private:
  PeriodicModelAverager(ProcessGroup* group, int64_t period, int64_t warmup_steps)
      : group_(group), period_(period), warmup_steps_(warmup_steps) {}
  ProcessGroup* group_;
  const int64_t period_, warmup_steps_;
  int64_t step_ = 0;
  int64_t averaged_ = 0;
  at::Tensor flat_;  // the parameters, back to back (in shared memory where the group has it)
};

struct PostLocalSgdOptions {
  // Iterations (synchronized backward passes) of the plain all-reduce before local SGD starts:
  // torch's start_localSGD_iter; also the averager's warm-up.
  int64_t start_iteration = 0;
  // After the start, average gradients within each node (torch's post_local_gradient_allreduce with
  // intra-node subgroups); false: each rank steps on its own gradients alone. On a job of one node,
  // true keeps the replicas equal, so only the averaging's cost remains.
  bool gradient_allreduce_within_node = true;
  // Lightning's model_averaging_period: parameters averaged over every rank every this many
  // optimizer steps once local SGD starts. Required (>= 1).
  int64_t model_averaging_period = 0;
};

// The hook and the averager of one DDP model, sharing the iteration count. Thread safety: the hook
// runs under the reducer's mutex during backward; AfterOptimizerStep() and ContinueFrom() run
// between steps on the training thread. Ownership: borrows the group, which must outlive it and its
// hook.
class PostLocalSgd {
 public:
  // InvalidArgument for options out of range; Unimplemented (from ProcessGroup::CheckNodeAllReduce)
  // when gradients are to be averaged within nodes whose ranks cannot do so.
  static absl::StatusOr<std::unique_ptr<PostLocalSgd>> Create(ProcessGroup* group,
                                                              const PostLocalSgdOptions& options);
  // For DDP's reducer: the plain all-reduce before the start, the node's all-reduce or nothing
  // after it.
  std::shared_ptr<CommHook> hook() const { return hook_; }
  // After each optimizer step (Lightning's DDPStrategy.optimizer_step): the averager's turn, on the
  // parameters that have gradients.
  absl::Status AfterOptimizerStep(const std::vector<at::Tensor>& parameters);
  // A resumed run continues after `optimizer_steps` steps (one synchronized backward pass each):
  // past the start, it stays local.
  void ContinueFrom(int64_t optimizer_steps);
  const PeriodicModelAverager& averager() const { return *averager_; }

 private:
  // The options and the hook's iteration count (post_local_sgd.cc).
  struct State;
  friend class PostLocalSgdHook;
  PostLocalSgd(std::shared_ptr<State> state, std::shared_ptr<CommHook> hook,
               std::unique_ptr<PeriodicModelAverager> averager);
  std::shared_ptr<State> state_;
  std::shared_ptr<CommHook> hook_;
  std::unique_ptr<PeriodicModelAverager> averager_;
};

// InvalidArgument saying why ZeRO (which steps each parameter on one rank for all) cannot follow
// post-local SGD's gradients, which differ between ranks.
absl::Status ZeroRedundancyWithLocalSgdError();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_POST_LOCAL_SGD_H_
