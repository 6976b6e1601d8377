// The bucketed gradient reducer (see reducer.h).
#include "core/ddp/reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "core/ddp/sharding_strategy.h"
#include "core/trace/call_signature.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

struct Reducer::Hooks {
  // The accumulators are held strongly: a tensor only keeps a weak reference to its own.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> handles;
};

namespace {

// A tensor shaped like `like` over buffer[offset, offset + like.numel()). It shares the buffer's
// storage but is not an autograd view, so LibTorch's Optimizer::zero_grad (which detaches gradients
// in place) works on it.
at::Tensor AliasInto(const at::Tensor& buffer, int64_t offset, const at::Tensor& like) {
  at::Tensor alias = at::empty({0}, buffer.options());
  alias.set_(buffer.storage(), buffer.storage_offset() + offset, like.sizes(),
             at::detail::defaultStrides(like.sizes()));
  return alias;
}

// Every rank must reduce the same tensors (count, sizes, dtypes), or the bucket collectives would
// not match (Gloo aborts the process on a size mismatch). One small all-gather of a fingerprint, as
// PyTorch's DDP verifies parameter shapes at construction.
absl::Status CheckSameTensorsOnEveryRank(ProcessGroup& group,
                                         const std::vector<at::Tensor>& tensors) {
  if (group.world_size() == 1) return absl::OkStatus();
  // The fingerprint wraps around in unsigned arithmetic (signed overflow would be undefined: UBSan
  // found it).
  uint64_t fingerprint = 17;
  int64_t mine[3] = {static_cast<int64_t>(tensors.size()), 0, 0};
  for (const at::Tensor& t : tensors) {
    mine[1] += t.numel();
    fingerprint = fingerprint * 1000003u + static_cast<uint64_t>(t.numel()) * 31u +
                  static_cast<uint64_t>(t.scalar_type());
  }
  std::memcpy(&mine[2], &fingerprint, sizeof(fingerprint));
  std::vector<int64_t> all(3 * static_cast<size_t>(group.world_size()));
  RETURN_IF_ERROR(group.AllGather(mine, 3, DType::kInt64, all.data()));
  bool same = true;
  for (int r = 1; r < group.world_size(); ++r) {
    same =
        same && std::equal(all.begin(), all.begin() + 3, all.begin() + 3 * static_cast<int64_t>(r));
  }
  if (same) return absl::OkStatus();
  std::string message =
      "the ranks do not reduce the same tensors (count, sizes and dtypes must match):";
  for (size_t r = 0; r < static_cast<size_t>(group.world_size()); ++r) {
    absl::StrAppend(&message, "\n  rank ", r, ": ", all[3 * r], " tensors, ", all[3 * r + 1],
                    " elements");
  }
  return absl::InvalidArgumentError(message);
}

// What a sharded gradient buffer is made with: the tensor's dtype and device, no autograd.
at::TensorOptions GradientOptions(const at::Tensor& like) {
  return at::TensorOptions().dtype(like.scalar_type()).device(like.device());
}

// shard_gradients' conditions (reducer.h), or an error naming the one not met.
absl::Status CheckShardable(const std::vector<at::Tensor>& tensors, const ReducerOptions& options,
                            bool autograd_mode) {
  if (!autograd_mode) {
    return absl::InvalidArgumentError(
        "shard_gradients needs an autograd-mode reducer (the parameters themselves)");
  }
  if (options.comm_hook != nullptr) {
    RETURN_IF_ERROR(CheckShardingStrategy(ShardingStrategy::kShardGradOp,
                                          /*zero_redundancy_optimizer=*/false,
                                          options.comm_hook->name()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::ScalarType dtype = tensors[i].scalar_type();
    if (dtype != at::kFloat && dtype != at::kDouble) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_gradients: parameter ", i, " is ", c10::toString(dtype),
                       "; sharded gradients are reduce-scattered as float32 or float64 "
                       "(mixed precision keeps float32 parameters)"));
    }
  }
  return absl::OkStatus();
}

// ReducerOptions::buckets as given: OK when each tensor is in one bucket of one dtype.
absl::Status CheckGivenBuckets(const std::vector<at::Tensor>& tensors,
                               const std::vector<std::vector<size_t>>& buckets) {
  std::vector<bool> seen(tensors.size(), false);
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].empty())
      return absl::InvalidArgumentError(absl::StrCat("bucket ", b, " is empty"));
    for (size_t i : buckets[b]) {
      if (i >= tensors.size() || seen[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket ", b, ": tensor ", i,
                         i >= tensors.size() ? " does not exist" : " is in two buckets"));
      }
      seen[i] = true;
      if (tensors[i].scalar_type() != tensors[buckets[b][0]].scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat("bucket ", b, " mixes dtypes"));
      }
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " is in no bucket"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::vector<size_t>> AssignBuckets(const std::vector<at::Tensor>& tensors,
                                               size_t first_cap_bytes, size_t cap_bytes) {
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    bool closed_one = false;
  };
  std::map<at::ScalarType, Open> open;
  std::vector<std::vector<size_t>> buckets;
  auto close = [&buckets](Open& bucket) {
    if (bucket.members.empty()) return;
    buckets.push_back(std::move(bucket.members));
    bucket.members.clear();
    bucket.bytes = 0;
    bucket.closed_one = true;
  };
  for (size_t i = tensors.size(); i-- > 0;) {
    Open& bucket = open[tensors[i].scalar_type()];
    const size_t limit = bucket.closed_one ? cap_bytes : first_cap_bytes;
    const size_t bytes = tensors[i].numel() * tensors[i].element_size();
    if (bytes >= limit) close(bucket);  // a tensor at or over the cap gets a bucket of its own
    bucket.members.push_back(i);
    bucket.bytes += bytes;
    if (bucket.bytes >= limit) close(bucket);
  }
  for (auto& [dtype, bucket] : open) close(bucket);
  // Ready order in backward: the bucket holding the latest-registered tensor first.
  std::sort(buckets.begin(), buckets.end(),
            [](const std::vector<size_t>& a, const std::vector<size_t>& b) {
              return a.front() > b.front();
            });
  return buckets;
}

Reducer::Reducer(ProcessGroup* group, std::vector<at::Tensor> tensors, ReducerOptions options,
                 bool autograd_mode)
    : group_(group),
      tensors_(std::move(tensors)),
      options_(std::move(options)),
      autograd_mode_(autograd_mode),
      bucket_of_(tensors_.size()),
      slot_of_(tensors_.size()),
      ready_(tensors_.size(), false),
      used_(tensors_.size(), false),
      written_(tensors_.size(), false) {}

Reducer::~Reducer() {
  if (hooks_) {
    for (size_t i = 0; i < hooks_->accumulators.size(); ++i) {
      hooks_->accumulators[i]->del_post_hook(hooks_->handles[i]);
    }
  }
}

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(ProcessGroup* group,
                                                         std::vector<at::Tensor> tensors,
                                                         ReducerOptions options,
                                                         bool autograd_mode) {
  if (group == nullptr) return absl::InvalidArgumentError("the reducer needs a process group");
  if (!(options.bucket_cap_mb > 0) || !(options.first_bucket_cap_mb > 0)) {
    return absl::InvalidArgumentError("bucket caps must be positive");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined() || t.is_sparse() || !t.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " is not a defined, dense, contiguous tensor"));
    }
    if (autograd_mode && !t.requires_grad()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", i, " does not require grad; pass only trainable parameters"));
    }
  }
  if (!autograd_mode) options.gradient_as_bucket_view = false;  // MoveBuffersIntoBuckets()
  if (options.shard_gradients) RETURN_IF_ERROR(CheckShardable(tensors, options, autograd_mode));
  if (!options.comm_hook) options.comm_hook = MakeAllReduceHook();
  RETURN_IF_ERROR(CheckSameTensorsOnEveryRank(*group, tensors));
  std::unique_ptr<Reducer> reducer(
      new Reducer(group, std::move(tensors), std::move(options), autograd_mode));
  const auto mb = [](double v) { return static_cast<size_t>(v * 1024 * 1024); };
  std::vector<std::vector<size_t>> groups = reducer->options_.buckets;
  if (groups.empty()) {
    groups = AssignBuckets(reducer->tensors_, mb(reducer->options_.first_bucket_cap_mb),
                           mb(reducer->options_.bucket_cap_mb));
  } else {
    RETURN_IF_ERROR(CheckGivenBuckets(reducer->tensors_, groups));
  }
  const int world = group->world_size(), rank = group->rank();
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    bucket.members = groups[b];
    if (reducer->options_.shard_gradients) {
      std::vector<at::Tensor> members;
      for (size_t slot = 0; slot < bucket.members.size(); ++slot) {
        members.push_back(reducer->tensors_[bucket.members[slot]]);
        reducer->bucket_of_[bucket.members[slot]] = b;
        reducer->slot_of_[bucket.members[slot]] = slot;
      }
      bucket.sections = std::make_unique<SectionLayout>(members, world);
      bucket.shard = at::zeros({bucket.sections->section_elements()}, GradientOptions(members[0]));
      bucket.shard_views = bucket.sections->Views(bucket.shard, rank, members);
      bucket.pending = bucket.members.size();
      reducer->buckets_.push_back(std::move(bucket));
      continue;
    }
    int64_t elements = 0;
    for (size_t i : bucket.members) elements += reducer->tensors_[i].numel();
    const at::Tensor& first = reducer->tensors_[bucket.members.front()];
    ASSIGN_OR_RETURN(at::Tensor buffer, group->NewReductionBuffer(elements, first));
    bucket.buffer = std::move(buffer);
    int64_t offset = 0;
    for (size_t slot = 0; slot < bucket.members.size(); ++slot) {
      const size_t i = bucket.members[slot];
      const at::Tensor& t = reducer->tensors_[i];
      bucket.views.push_back(AliasInto(bucket.buffer, offset, t));
      offset += t.numel();
      reducer->bucket_of_[i] = b;
      reducer->slot_of_[i] = slot;
      if (reducer->autograd_mode_ && reducer->options_.gradient_as_bucket_view &&
          t.grad().defined()) {
        bucket.views.back().copy_(t.grad());
        reducer->tensors_[i].mutable_grad() = bucket.views.back();
      }
    }
    bucket.pending = bucket.members.size();
    reducer->buckets_.push_back(std::move(bucket));
  }
  if (reducer->options_.shard_gradients) {
    for (const at::Tensor& parameter : reducer->tensors_) {
      // A leaf of its own over the parameter's rows: the sharded optimizer steps it in place.
      at::Tensor rows = OwnedRows(parameter.detach(), rank, world);
      rows.requires_grad_(true);
      reducer->shard_parameters_.push_back(std::move(rows));
    }
  }
  return reducer;
}

absl::Status Reducer::InstallAutogradHooks() {
  if (!autograd_mode_) return absl::FailedPreconditionError("not an autograd-mode reducer");
  if (hooks_) return absl::OkStatus();
  hooks_ = std::make_unique<Hooks>();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(tensors_[i]);
    if (accumulator == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", i, " is not a leaf tensor"));
    }
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list&) {
          absl::MutexLock lock(&mutex_);
          if (sync_enabled_ && !finalize_queued_ && backward_check_) {
            absl::Status checked = backward_check_();
            if (!checked.ok()) throw std::runtime_error(std::string(checked.message()));
          }
          used_[i] = true;
          if (!finalize_queued_) {  // under no_sync too: Finalize counts the pass
            finalize_queued_ = true;
            torch::autograd::Engine::get_default_engine().queue_callback([this] {
              absl::Status status = Finalize();
              if (!status.ok()) throw std::runtime_error(std::string(status.message()));
            });
          }
          if (!sync_enabled_) return outputs;
          const ScopedBackwardPasses passes(unsynced_passes_ + 1);
          absl::Status status = MarkReadyLocked(i, /*used=*/true);
          if (!status.ok()) throw std::runtime_error(std::string(status.message()));
          return outputs;
        });
    hooks_->handles.push_back(accumulator->add_post_hook(std::move(hook)));
    hooks_->accumulators.push_back(std::move(accumulator));
  }
  return absl::OkStatus();
}

absl::Status Reducer::DetachShardParameters() {
  if (!options_.shard_gradients) {
    return absl::FailedPreconditionError("DetachShardParameters needs shard_gradients");
  }
  for (at::Tensor& rows : shard_parameters_) {
    at::Tensor own = rows.detach().clone();
    own.requires_grad_(true);
    rows = std::move(own);
  }
  shard_parameters_detached_ = true;
  return absl::OkStatus();
}

at::Tensor& Reducer::GradientOf(size_t index) {
  return autograd_mode_ ? tensors_[index].mutable_grad() : tensors_[index];
}

absl::Status Reducer::MarkReady(size_t index) {
  absl::MutexLock lock(&mutex_);
  if (index >= tensors_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient index ", index, " is outside [0, ", tensors_.size(), ")"));
  }
  used_[index] = true;
  if (!sync_enabled_) return absl::OkStatus();
  const ScopedBackwardPasses passes(unsynced_passes_ + 1);
  return MarkReadyLocked(index, /*used=*/true);
}

absl::Status Reducer::MarkReadyLocked(size_t index, bool used) {
  if (ready_[index]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gradient ", index, " was marked ready twice in one iteration (call Finalize between)"));
  }
  ready_[index] = true;
  Bucket& bucket = buckets_[bucket_of_[index]];
  if (options_.shard_gradients) {
    PackShardedGradient(index, used);
    if (--bucket.pending == 0) return StartReadyBuckets();
    return absl::OkStatus();
  }
  at::Tensor& view = bucket.views[slot_of_[index]];
  at::Tensor& grad = GradientOf(index);
  if (used && grad.defined()) {
    if (!grad.is_same(view)) view.copy_(grad);
    if (autograd_mode_ && options_.gradient_as_bucket_view) grad = view;
  } else {
    view.zero_();
  }
  if (--bucket.pending == 0) return StartReadyBuckets();
  return absl::OkStatus();
}

void Reducer::PackShardedGradient(size_t index, bool used) {
  Bucket& bucket = buckets_[bucket_of_[index]];
  at::Tensor& grad = tensors_[index].mutable_grad();
  if (!bucket.buffer.defined()) {  // zeros: an unused gradient and the padding stay zero
    bucket.buffer = at::zeros({group_->world_size() * bucket.sections->section_elements()},
                              GradientOptions(tensors_[index]));
  }
  if (used && grad.defined()) bucket.sections->Scatter(grad, slot_of_[index], bucket.buffer);
  grad = at::Tensor();  // this rank keeps its rows only, once they are averaged
}

absl::Status Reducer::ReduceScatterBucket(size_t bucket_index) {
  Bucket& bucket = buckets_[bucket_index];
  absl::Status status = group_->ReduceScatter(bucket.buffer, bucket.shard, ReduceOp::kMean);
  bucket.buffer = at::Tensor();
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("reduce-scatter of gradient bucket ",
                                                  bucket_index, ": ", status.message()));
}

absl::Status Reducer::StartReadyBuckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    if (options_.shard_gradients) {
      RETURN_IF_ERROR(ReduceScatterBucket(next_bucket_));
      launch_log_.push_back(static_cast<int>(next_bucket_));
      ++next_bucket_;
      continue;
    }
    Bucket& bucket = buckets_[next_bucket_];
    GradBucket view{static_cast<int>(next_bucket_), static_cast<int>(buckets_.size()),
                    bucket.buffer, bucket.views};
    absl::StatusOr<std::unique_ptr<PendingReduction>> started =
        absl::InternalError("the communication hook threw");
    try {
      started = options_.comm_hook->Start(*group_, view);
    } catch (const std::exception& e) {
      started =
          ExceptionStatus(absl::StrCat("communication hook '", options_.comm_hook->name(), "'"), e);
    }
    if (!started.ok()) return started.status();
    bucket.reduction = *std::move(started);
    launch_log_.push_back(static_cast<int>(next_bucket_));
    ++next_bucket_;
  }
  return absl::OkStatus();
}

absl::Status Reducer::Finalize() {
  absl::MutexLock lock(&mutex_);
  return FinalizeLocked();
}

absl::Status Reducer::FinalizeLocked() {
  finalize_queued_ = false;
  std::fill(written_.begin(), written_.end(), false);
  if (!sync_enabled_) {
    ++unsynced_passes_;
    return absl::OkStatus();
  }
  // Its collectives carry the passes they sum, so ranks whose no_sync differed disagree here.
  const ScopedBackwardPasses passes(unsynced_passes_ + 1);
  absl::Status status = absl::OkStatus();
  // Gradients that never became ready (unused parameters) count as zero, unless no_sync iterations
  // left an accumulated gradient.
  for (size_t i = 0; i < tensors_.size() && status.ok(); ++i) {
    if (!ready_[i]) status = MarkReadyLocked(i, used_[i]);
  }
  // How many ranks used each parameter: a float sum (exact for these counts), because float sums
  // take the shared-memory path where Gloo's small all-reduce would cost milliseconds of wake-ups
  // on busy cores.
  std::vector<float> globally_used;
  // static_graph alone finds them too, once (as PyTorch's: "it does not matter whether users set
  // find_unused_parameters").
  if (status.ok() && (options_.find_unused_parameters || options_.static_graph)) {
    if (!static_globally_used_.empty()) {
      globally_used = static_globally_used_;
      status = CheckStaticGraph(globally_used);
    } else {
      globally_used.assign(used_.begin(), used_.end());
      status = group_->AllReduce(globally_used.data(), globally_used.size(), DType::kFloat32,
                                 ReduceOp::kSum);
      if (status.ok() && options_.static_graph) static_globally_used_ = globally_used;
    }
  }
  for (Bucket& bucket : buckets_) {
    if (bucket.reduction == nullptr) continue;
    absl::Status waited;
    try {
      waited = bucket.reduction->Wait();
    } catch (const std::exception& e) {
      waited =
          ExceptionStatus(absl::StrCat("communication hook '", options_.comm_hook->name(), "'"), e);
    }
    bucket.reduction.reset();
    if (status.ok()) status = waited;
  }
  if (status.ok() && gradient_scale_ != 1.0) {
    for (Bucket& bucket : buckets_) {
      (options_.shard_gradients ? bucket.shard : bucket.buffer).mul_(gradient_scale_);
    }
  }
  if (status.ok()) ++synchronized_backwards_;
  if (status.ok() && options_.shard_gradients) {
    WriteGradientShards(globally_used);
  } else if (status.ok()) {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!globally_used.empty() && globally_used[i] == 0) continue;  // untouched, as in PyTorch
      written_[i] = true;
      at::Tensor& view = buckets_[bucket_of_[i]].views[slot_of_[i]];
      at::Tensor& grad = GradientOf(i);
      if (autograd_mode_ && options_.gradient_as_bucket_view) {
        grad = view;
      } else if (grad.defined()) {
        if (!grad.is_same(view)) grad.copy_(view);
      } else {
        grad = view.clone();
      }
    }
  }
  ResetIteration();
  unsynced_passes_ = 0;
  return status;
}

void Reducer::WriteGradientShards(const std::vector<float>& globally_used) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    at::Tensor& grad = shard_parameters_[i].mutable_grad();
    if (!globally_used.empty() && globally_used[i] == 0) {
      grad = at::Tensor();  // untouched, as in PyTorch: the optimizer skips it
      continue;
    }
    written_[i] = true;
    grad = buckets_[bucket_of_[i]].shard_views[slot_of_[i]];
  }
}

absl::Status Reducer::CheckStaticGraph(const std::vector<float>& first_used) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (used_[i] && first_used[i] == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("static_graph: rank ", group_->rank(), " used parameter ", i, " (",
                       c10::str(tensors_[i].sizes()),
                       "), which no rank used in the first iteration: the graph "
                       "changed; turn static_graph off for a model whose used parameters vary"));
    }
  }
  return absl::OkStatus();
}

void Reducer::ResetIteration() {
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(used_.begin(), used_.end(), false);
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.reduction.reset();
    if (options_.shard_gradients) bucket.buffer = at::Tensor();  // left by a failed iteration
  }
  next_bucket_ = 0;
}

absl::Status Reducer::ShadowIteration() {
  absl::MutexLock lock(&mutex_);
  if (!sync_enabled_) {
    return absl::FailedPreconditionError("a shadow iteration under no_sync communicates nothing");
  }
  std::fill(used_.begin(), used_.end(), false);  // this rank used no parameter
  // NoteJoinedPass() counted this iteration among the accumulated ones; FinalizeLocked counts it as
  // the synchronized one.
  if (unsynced_passes_ > 0) --unsynced_passes_;
  return FinalizeLocked();
}

void Reducer::NoteJoinedPass() {
  absl::MutexLock lock(&mutex_);
  ++unsynced_passes_;
}

absl::StatusOr<std::vector<at::Tensor>> Reducer::MoveBuffersIntoBuckets() {
  absl::MutexLock lock(&mutex_);
  if (autograd_mode_) {
    return absl::FailedPreconditionError(
        "an autograd-mode reducer's gradients live in its buckets already "
        "(gradient_as_bucket_view)");
  }
  if (options_.find_unused_parameters) {
    return absl::FailedPreconditionError(
        "with find_unused_parameters the buffers stay outside the buckets: a buffer that no "
        "rank marked must stay untouched, and its slot is zeroed");
  }
  if (std::find(ready_.begin(), ready_.end(), true) != ready_.end()) {
    return absl::FailedPreconditionError(
        "an iteration is in progress (some buffer is marked ready): move the buffers between "
        "iterations");
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    at::Tensor& slot = buckets_[bucket_of_[i]].views[slot_of_[i]];
    if (!tensors_[i].is_same(slot)) {
      slot.copy_(tensors_[i]);
      tensors_[i] = slot;
    }
  }
  return tensors_;
}

absl::StatusOr<bool> Reducer::WrittenByLastFinalize(size_t index) const {
  absl::MutexLock lock(&mutex_);
  if (index >= written_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient index ", index, " is outside [0, ", written_.size(), ")"));
  }
  return written_[index];
}

void Reducer::set_gradient_scale(double scale) {
  absl::MutexLock lock(&mutex_);
  gradient_scale_ = scale;
}

void Reducer::set_sync_enabled(bool enabled) {
  absl::MutexLock lock(&mutex_);
  sync_enabled_ = enabled;
}

bool Reducer::sync_enabled() const {
  absl::MutexLock lock(&mutex_);
  return sync_enabled_;
}

int64_t Reducer::synchronized_backwards() const {
  absl::MutexLock lock(&mutex_);
  return synchronized_backwards_;
}

std::vector<int> Reducer::TakeLaunchLog() {
  absl::MutexLock lock(&mutex_);
  std::vector<int> log;
  log.swap(launch_log_);
  return log;
}

}  // namespace ddpspawn
