// The communication hooks (see comm_hooks.h).
#include "core/ddp/comm_hooks.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// A reduction whose remaining work is a function run at Wait().
class DeferredReduction : public PendingReduction {
 public:
  explicit DeferredReduction(std::function<absl::Status()> finish) : finish_(std::move(finish)) {}
  absl::Status Wait() override {
    if (!finish_) return absl::FailedPreconditionError("already waited for");
    absl::Status status = finish_();
    finish_ = nullptr;
    return status;
  }

 private:
  std::function<absl::Status()> finish_;
};

// Averages `tensor` across ranks in place. fp16 and bf16 are divided before the sum (against
// overflow); on Gloo, which cannot reduce bf16, bf16 is all-gathered as raw bytes instead and
// summed in fp32 at Wait(). NCCL reduces bf16 natively.
absl::StatusOr<std::unique_ptr<PendingReduction>> StartMean(ProcessGroup& group,
                                                            at::Tensor tensor) {
  const int world = group.world_size();
  if (tensor.scalar_type() == at::kBFloat16 && group.backend() != Backend::kNccl) {
    return std::make_unique<DeferredReduction>([&group, tensor, world]() -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<at::Tensor> all, group.AllGather(tensor.view(at::kByte)));
      at::Tensor sum = at::zeros(tensor.sizes(), at::kFloat);
      for (const at::Tensor& bytes : all) {
        sum.add_(bytes.view(at::kBFloat16).view(tensor.sizes()).to(at::kFloat));
      }
      tensor.copy_(sum.div_(world));
      return absl::OkStatus();
    });
  }
  ReduceOp op = ReduceOp::kMean;
  if (tensor.scalar_type() == at::kHalf || tensor.scalar_type() == at::kBFloat16) {
    tensor.div_(world);
    op = ReduceOp::kSum;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<PendingWork> work, group.StartAllReduce(tensor, op));
  std::shared_ptr<PendingWork> shared = std::move(work);
  return std::make_unique<DeferredReduction>([shared] { return shared->Wait(); });
}

class AllReduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                          GradBucket& bucket) override {
    return StartMean(group, bucket.buffer);
  }
};

// A bucket's gradients as views into a new flat buffer.
std::vector<at::Tensor> ViewsLike(const std::vector<at::Tensor>& like, const at::Tensor& flat) {
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const at::Tensor& t : like) {
    views.push_back(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  return views;
}

class CompressWrapper : public CommHook {
 public:
  CompressWrapper(at::ScalarType dtype, std::shared_ptr<CommHook> inner)
      : dtype_(dtype), inner_(std::move(inner)) {}
  std::string name() const override {
    return absl::StrCat(dtype_ == at::kHalf ? "fp16" : "bf16", "_compress(", inner_->name(), ")");
  }
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                          GradBucket& bucket) override {
    // Integer buckets would not survive a float16 round trip: they go as they are.
    if (!at::isFloatingType(bucket.buffer.scalar_type())) {
      return inner_->Start(group, bucket);
    }
    auto compressed = std::make_shared<GradBucket>();
    compressed->index = bucket.index;
    compressed->count = bucket.count;
    compressed->buffer = bucket.buffer.to(dtype_);
    compressed->gradients = ViewsLike(bucket.gradients, compressed->buffer);
    ASSIGN_OR_RETURN(std::unique_ptr<PendingReduction> inner, inner_->Start(group, *compressed));
    std::shared_ptr<PendingReduction> pending = std::move(inner);
    at::Tensor original = bucket.buffer;
    return std::make_unique<DeferredReduction>([pending, compressed, original]() {
      absl::Status status = pending->Wait();
      if (status.ok()) original.copy_(compressed->buffer);
      return status;
    });
  }

 private:
  at::ScalarType dtype_;
  std::shared_ptr<CommHook> inner_;
};

// Gram-Schmidt on the columns of `matrix`, in place.
void Orthogonalize(at::Tensor& matrix) {
  const int64_t columns = matrix.size(1);
  for (int64_t i = 0; i < columns; ++i) {
    at::Tensor column = matrix.narrow(1, i, 1);
    column.div_(column.norm().add_(1e-8));
    if (i + 1 < columns) {
      at::Tensor rest = matrix.narrow(1, i + 1, columns - i - 1);
      rest.sub_((column * rest).sum(0, /*keepdim=*/true) * column);
    }
  }
}

class PowerSgdHook : public CommHook {
 public:
  explicit PowerSgdHook(std::shared_ptr<PowerSgdState> state) : state_(std::move(state)) {}
  std::string name() const override {
    return state_->options.batched ? "batched_powersgd" : "powersgd";
  }

  // Before start_iteration: a plain mean. After: error feedback, the dense gradients' mean and P =
  // M Q started now; the rest (orthogonalise P, Q = M^T P, mean of Q, M = P Q^T) when the reduction
  // is waited for.
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                          GradBucket& bucket) override {
    PowerSgdState& s = *state_;
    if (s.iteration < s.options.start_iteration) {
      if (bucket.is_last()) ++s.iteration;
      return StartMean(group, bucket.buffer);
    }
    if (bucket.buffer.scalar_type() == at::kHalf && bucket.buffer.device().is_cpu()) {
      return absl::UnimplementedError(
          "PowerSGD cannot run in float16 on CPU (LibTorch has no CPU float16 matmul): wrap it "
          "with bf16 compression instead, or run it uncompressed");
    }
    if (bucket.index == 0) s.last_sent_elements = s.last_dense_elements = 0;
    s.last_dense_elements += bucket.buffer.numel();
    auto work = std::make_shared<Work>();
    work->input = bucket.buffer;
    work->index = bucket.index;
    work->is_last = bucket.is_last();
    if (s.options.use_error_feedback) {
      at::Tensor& error = s.error[bucket.index];
      if (!error.defined() || error.numel() != work->input.numel()) {
        error = at::zeros_like(work->input);
      }
      work->input.add_(error);
      work->input_before = work->input.clone();
    }
    SplitGradients(bucket, *work);
    RETURN_IF_ERROR(StartDense(group, *work));
    RETURN_IF_ERROR(StartP(group, *work));
    std::shared_ptr<PowerSgdState> state = state_;
    return std::make_unique<DeferredReduction>(
        [&group, work, state]() { return Finish(group, *work, *state); });
  }

 private:
  // What one bucket's PowerSGD step keeps between Start() and Wait().
  struct Work {
    at::Tensor input, input_before;  // the bucket, and its copy before compression
    int index = 0;
    bool is_last = false;
    // Batched: the bucket zero-padded to side * side, the one matrix.
    at::Tensor batched_square;
    std::vector<at::Tensor> matrices, dense, ps, qs;
    at::Tensor dense_flat, p_flat, q_flat;
    std::unique_ptr<PendingReduction> dense_pending, p_pending;
  };

  // The bucket's gradients worth compressing (as matrices), and the rest (sent as they are).
  void SplitGradients(const GradBucket& bucket, Work& work) const {
    const PowerSgdOptions& o = state_->options;
    if (o.batched) {
      const int64_t n = work.input.numel();
      int64_t side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
      while (side * side < n) ++side;
      const int64_t rank = std::min<int64_t>(o.matrix_approximation_rank, side);
      if (static_cast<double>(side) / static_cast<double>(2 * rank) >= o.min_compression_rate) {
        work.batched_square = at::zeros({side * side}, work.input.options());
        work.batched_square.narrow(0, 0, n).copy_(work.input);
        work.matrices.push_back(work.batched_square.view({side, side}));
      } else {
        work.dense.push_back(work.input);
      }
      return;
    }
    for (const at::Tensor& g : bucket.gradients) {
      const int64_t rows = g.dim() > 1 ? g.size(0) : 0;
      const int64_t cols = rows > 0 ? g.numel() / rows : 0;
      const int64_t rank = std::min<int64_t>({o.matrix_approximation_rank, rows, cols});
      if (rank > 0 &&
          static_cast<double>(rows * cols) / static_cast<double>((rows + cols) * rank) >=
              o.min_compression_rate) {
        work.matrices.push_back(g.view({rows, cols}));
      } else {
        work.dense.push_back(g);
      }
    }
  }

  // The dense gradients' mean, in one flat buffer.
  absl::Status StartDense(ProcessGroup& group, Work& work) {
    if (work.dense.empty()) return absl::OkStatus();
    std::vector<at::Tensor> flat;
    flat.reserve(work.dense.size());
    for (const at::Tensor& d : work.dense) flat.push_back(d.reshape({-1}));
    work.dense_flat = at::cat(flat);
    state_->last_sent_elements += work.dense_flat.numel();
    ASSIGN_OR_RETURN(work.dense_pending, StartMean(group, work.dense_flat));
    return absl::OkStatus();
  }

  // P = M Q for every matrix, in one flat buffer so that one collective sends them all; Q is this
  // bucket's last one (warm start) or a fresh draw.
  absl::Status StartP(ProcessGroup& group, Work& work) {
    PowerSgdState& s = *state_;
    const PowerSgdOptions& o = s.options;
    std::vector<at::Tensor>& qs = s.q[work.index];
    if (!o.warm_start || qs.size() != work.matrices.size()) {
      qs.clear();
      at::Generator generator =
          at::detail::createCPUGenerator(o.seed + 7919 * static_cast<uint64_t>(work.index) +
                                         (o.warm_start ? 0 : static_cast<uint64_t>(s.iteration)));
      for (const at::Tensor& m : work.matrices) {
        const int64_t rank = std::min<int64_t>({o.matrix_approximation_rank, m.size(0), m.size(1)});
        // Drawn on the CPU (the generator's device), so that every rank gets the same Q whatever
        // its device, then moved to the bucket's.
        qs.push_back(at::randn({m.size(1), rank}, generator, work.input.options().device(at::kCPU))
                         .to(work.input.device()));
      }
    }
    int64_t p_elements = 0, q_elements = 0;
    for (size_t i = 0; i < work.matrices.size(); ++i) {
      p_elements += work.matrices[i].size(0) * qs[i].size(1);
      q_elements += qs[i].numel();
    }
    work.p_flat = at::empty({p_elements}, work.input.options());
    work.q_flat = at::empty({q_elements}, work.input.options());
    int64_t p_offset = 0, q_offset = 0;
    for (size_t i = 0; i < work.matrices.size(); ++i) {
      const int64_t rows = work.matrices[i].size(0), cols = work.matrices[i].size(1),
                    rank = qs[i].size(1);
      work.ps.push_back(work.p_flat.narrow(0, p_offset, rows * rank).view({rows, rank}));
      work.qs.push_back(work.q_flat.narrow(0, q_offset, cols * rank).view({cols, rank}));
      work.qs.back().copy_(qs[i]);
      at::mm_out(work.ps.back(), work.matrices[i], work.qs.back());
      p_offset += rows * rank;
      q_offset += cols * rank;
    }
    s.last_sent_elements += p_elements + q_elements;
    if (p_elements == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(work.p_pending, StartMean(group, work.p_flat));
    return absl::OkStatus();
  }

  // When the bucket's reduction is waited for: the dense gradients back in place, then P's mean
  // orthogonalised, Q = M^T P averaged, and M = P Q^T; the error feedback and the warm start kept
  // for the next step.
  static absl::Status Finish(ProcessGroup& group, Work& work, PowerSgdState& state) {
    if (work.dense_pending) {
      RETURN_IF_ERROR(work.dense_pending->Wait());
      int64_t offset = 0;
      for (const at::Tensor& d : work.dense) {
        d.copy_(work.dense_flat.narrow(0, offset, d.numel()).view(d.sizes()));
        offset += d.numel();
      }
    }
    if (work.p_pending) {
      RETURN_IF_ERROR(work.p_pending->Wait());
      for (size_t i = 0; i < work.matrices.size(); ++i) {
        Orthogonalize(work.ps[i]);
        at::mm_out(work.qs[i], work.matrices[i].t(), work.ps[i]);
      }
      ASSIGN_OR_RETURN(std::unique_ptr<PendingReduction> q_mean, StartMean(group, work.q_flat));
      RETURN_IF_ERROR(q_mean->Wait());
      for (size_t i = 0; i < work.matrices.size(); ++i) {
        at::mm_out(work.matrices[i], work.ps[i], work.qs[i].t());
        state.q[work.index][i] = work.qs[i].clone();
      }
      if (work.batched_square.defined()) {
        work.input.copy_(work.batched_square.narrow(0, 0, work.input.numel()));
      }
    }
    if (state.options.use_error_feedback) state.error[work.index] = work.input_before - work.input;
    if (work.is_last) ++state.iteration;
    return absl::OkStatus();
  }

  std::shared_ptr<PowerSgdState> state_;
};

}  // namespace

std::shared_ptr<CommHook> MakeAllReduceHook() { return std::make_shared<AllReduceHook>(); }

std::shared_ptr<CommHook> MakeFp16CompressHook() {
  return std::make_shared<CompressWrapper>(at::kHalf, MakeAllReduceHook());
}

std::shared_ptr<CommHook> MakeBf16CompressHook() {
  return std::make_shared<CompressWrapper>(at::kBFloat16, MakeAllReduceHook());
}

absl::StatusOr<std::shared_ptr<CommHook>> MakeCompressWrapper(at::ScalarType dtype,
                                                              std::shared_ptr<CommHook> inner) {
  if (dtype != at::kHalf && dtype != at::kBFloat16) {
    return absl::InvalidArgumentError("a compression wrapper casts to float16 or bfloat16");
  }
  if (inner == nullptr) return absl::InvalidArgumentError("the wrapped hook must not be null");
  return std::shared_ptr<CommHook>(std::make_shared<CompressWrapper>(dtype, std::move(inner)));
}

std::shared_ptr<CommHook> MakePowerSgdHook(std::shared_ptr<PowerSgdState> state) {
  return std::make_shared<PowerSgdHook>(std::move(state));
}

constexpr NamedValue<CommHookKind> kCommHookKindNames[] = {
    {"allreduce", CommHookKind::kAllReduce},
    {"fp16", CommHookKind::kFp16},
    {"bf16", CommHookKind::kBf16},
    {"powersgd", CommHookKind::kPowerSgd},
    {"batched_powersgd", CommHookKind::kBatchedPowerSgd},
    {"post_localsgd", CommHookKind::kPostLocalSgd},
    {"", CommHookKind::kAllReduce},
};

absl::string_view CommHookName(CommHookKind kind) { return NameOf(kCommHookKindNames, kind); }

absl::StatusOr<CommHookKind> ParseCommHook(absl::string_view name) {
  return ParseName(kCommHookKindNames, "communication hook", name);
}

bool IsPowerSgd(CommHookKind kind) {
  return kind == CommHookKind::kPowerSgd || kind == CommHookKind::kBatchedPowerSgd;
}

absl::StatusOr<std::shared_ptr<PowerSgdState>> MakePowerSgdState(CommHookKind kind,
                                                                 int powersgd_rank,
                                                                 int64_t powersgd_start) {
  if (!IsPowerSgd(kind)) return nullptr;
  if (powersgd_rank < 1 || powersgd_start < 0) {
    return absl::InvalidArgumentError(
        "PowerSGD needs a matrix approximation rank >= 1 and a start iteration >= 0");
  }
  auto state = std::make_shared<PowerSgdState>();
  state->options.matrix_approximation_rank = powersgd_rank;
  state->options.start_iteration = powersgd_start;
  state->options.batched = kind == CommHookKind::kBatchedPowerSgd;
  return state;
}

absl::StatusOr<std::shared_ptr<CommHook>> MakeCommHook(CommHookKind kind, int powersgd_rank,
                                                       int64_t powersgd_start) {
  switch (kind) {
    case CommHookKind::kAllReduce:
      return MakeAllReduceHook();
    case CommHookKind::kFp16:
      return MakeFp16CompressHook();
    case CommHookKind::kBf16:
      return MakeBf16CompressHook();
    case CommHookKind::kPowerSgd:
    case CommHookKind::kBatchedPowerSgd:
      break;
    case CommHookKind::kPostLocalSgd:
      // Its state and model averaging live in the strategy (core/ddp/post_local_sgd.h), which makes
      // the hook itself.
      return absl::InvalidArgumentError(
          "post_localsgd needs its start iteration and model averaging period, which fit's "
          "options give it (ddp_comm_hook=post_localsgd with model_averaging_period); a reducer "
          "of its own has no optimizer step to average after");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<PowerSgdState> state,
                   MakePowerSgdState(kind, powersgd_rank, powersgd_start));
  return MakePowerSgdHook(std::move(state));
}

}  // namespace ddpspawn
