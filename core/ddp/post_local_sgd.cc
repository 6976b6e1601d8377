// Post-local SGD's hook and the periodic model averager (see post_local_sgd.h).
#include "core/ddp/post_local_sgd.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

struct PostLocalSgd::State {
  PostLocalSgdOptions options;
  // Synchronized backward passes, counted up to the start: the hook writes it under the reducer's
  // lock during backward, ContinueFrom() between steps (no backward runs then).
  int64_t iteration = 0;
};

namespace {

// A reduction that finished when it started (or had nothing to do), or one the process group still
// runs.
class GroupReduction : public PendingReduction {
 public:
  explicit GroupReduction(std::unique_ptr<PendingWork> work) : work_(std::move(work)) {}
  absl::Status Wait() override { return work_ ? work_->Wait() : absl::OkStatus(); }

 private:
  std::unique_ptr<PendingWork> work_;  // null: the bucket stays as it is
};

}  // namespace

class PostLocalSgdHook : public CommHook {
 public:
  explicit PostLocalSgdHook(std::shared_ptr<PostLocalSgd::State> state)
      : state_(std::move(state)), plain_(MakeAllReduceHook()) {}
  std::string name() const override { return "post_localsgd"; }
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                          GradBucket& bucket) override {
    if (state_->iteration < state_->options.start_iteration) {
      if (bucket.is_last()) ++state_->iteration;
      return plain_->Start(group, bucket);
    }
    if (!state_->options.gradient_allreduce_within_node) {
      return std::make_unique<GroupReduction>(nullptr);  // local: this rank's own gradients
    }
    absl::StatusOr<std::unique_ptr<PendingWork>> work =
        group.StartNodeAllReduce(bucket.buffer, ReduceOp::kMean);
    if (!work.ok()) {
      return absl::Status(
          work.status().code(),
          absl::StrCat("post-local SGD's gradient mean within the node (turn it off with "
                       "post_local_gradient_allreduce=false): ",
                       work.status().message()));
    }
    return std::make_unique<GroupReduction>(*std::move(work));
  }

 private:
  std::shared_ptr<PostLocalSgd::State> state_;
  std::shared_ptr<CommHook> plain_;
};

absl::StatusOr<std::unique_ptr<PeriodicModelAverager>> PeriodicModelAverager::Create(
    ProcessGroup* group, int64_t period, int64_t warmup_steps) {
  if (group == nullptr) return absl::InvalidArgumentError("model averaging needs a process group");
  if (period < 1 || warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model averaging needs a period >= 1 and warm-up steps >= 0; got period ",
                     period, " and ", warmup_steps, " warm-up steps"));
  }
  return std::unique_ptr<PeriodicModelAverager>(
      new PeriodicModelAverager(group, period, warmup_steps));
}

absl::Status PeriodicModelAverager::AverageParameters(const std::vector<at::Tensor>& parameters) {
  const bool due = step_ >= warmup_steps_ && (step_ - warmup_steps_) % period_ == 0;
  ++step_;
  if (!due || group_->world_size() == 1 || parameters.empty()) return absl::OkStatus();
  c10::NoGradGuard no_grad;
  int64_t elements = 0;
  for (const at::Tensor& p : parameters) {
    if (p.scalar_type() != parameters[0].scalar_type() || p.device() != parameters[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model averaging flattens the parameters into one buffer, so they must share a dtype "
          "and a device; rank ",
          group_->rank(), " has ", c10::toString(parameters[0].scalar_type()), " on ",
          parameters[0].device().str(), " and ", c10::toString(p.scalar_type()), " on ",
          p.device().str()));
    }
    elements += p.numel();
  }
  if (!flat_.defined() || flat_.numel() != elements ||
      flat_.scalar_type() != parameters[0].scalar_type() ||
      flat_.device() != parameters[0].device()) {
    // Where the group sums in shared memory, this buffer lives there: its sum is in place, without
    // Gloo.
    ASSIGN_OR_RETURN(flat_, group_->NewReductionBuffer(elements, parameters[0]));
  }
  int64_t at = 0;
  for (const at::Tensor& p : parameters) {
    flat_.narrow(0, at, p.numel()).copy_(p.detach().reshape(-1));
    at += p.numel();
  }
  // As torch: divide first, then sum (exact for a power-of-two world).
  flat_.div_(group_->world_size());
  RETURN_IF_ERROR(group_->AllReduce(flat_, ReduceOp::kSum));
  int64_t offset = 0;
  for (const at::Tensor& p : parameters) {
    p.detach().copy_(flat_.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  ++averaged_;
  return absl::OkStatus();
}

PostLocalSgd::PostLocalSgd(std::shared_ptr<State> state, std::shared_ptr<CommHook> hook,
                           std::unique_ptr<PeriodicModelAverager> averager)
    : state_(std::move(state)), hook_(std::move(hook)), averager_(std::move(averager)) {}

absl::StatusOr<std::unique_ptr<PostLocalSgd>> PostLocalSgd::Create(
    ProcessGroup* group, const PostLocalSgdOptions& options) {
  if (group == nullptr) return absl::InvalidArgumentError("post-local SGD needs a process group");
  if (options.start_iteration < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "post-local SGD's start iteration must be >= 0, not ", options.start_iteration));
  }
  if (options.model_averaging_period < 1) {
    return absl::InvalidArgumentError(
        "post-local SGD needs model_averaging_period >= 1: without averaging the ranks' models "
        "drift apart for good once local steps start");
  }
  if (options.gradient_allreduce_within_node) {
    if (absl::Status s = group->CheckNodeAllReduce(); !s.ok()) {
      return absl::UnimplementedError(
          absl::StrCat("post-local SGD averages gradients within each node after its start "
                       "(post_local_gradient_allreduce=false steps on each rank's own instead): ",
                       s.message()));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<PeriodicModelAverager> averager,
                   PeriodicModelAverager::Create(group, options.model_averaging_period,
                                                 options.start_iteration));
  auto state = std::make_shared<State>();
  state->options = options;
  auto hook = std::make_shared<PostLocalSgdHook>(state);
  return std::unique_ptr<PostLocalSgd>(
      new PostLocalSgd(std::move(state), std::move(hook), std::move(averager)));
}

absl::Status PostLocalSgd::AfterOptimizerStep(const std::vector<at::Tensor>& parameters) {
  return averager_->AverageParameters(parameters);
}

void PostLocalSgd::ContinueFrom(int64_t optimizer_steps) {
  state_->iteration = std::min(optimizer_steps, state_->options.start_iteration);
  averager_->set_step(optimizer_steps);
}

absl::Status ZeroRedundancyWithLocalSgdError() {
  return absl::InvalidArgumentError(
      "zero_redundancy_optimizer and ddp_comm_hook post_localsgd do not combine: ZeRO steps each "
      "parameter on one rank for all, which needs the same gradients everywhere, and local "
      "SGD's differ between ranks");
}

}  // namespace ddpspawn
