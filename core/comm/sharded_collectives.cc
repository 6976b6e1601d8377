// ProcessGroup's collectives for sharded training (see process_group.h): reduce-scatter, and
// all-gather into one flat tensor, through this host's shared memory where the ranks have it, else
// the backend's own (Gloo's or NCCL's _reduce_scatter_base and _allgather_base, torch's
// reduce_scatter_tensor and all_gather_into_tensor).
#include <ATen/ATen.h>

#include <cstddef>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/comm/guarded.h"
#include "core/comm/process_group.h"
#include "core/comm/process_group_impl.h"
#include "core/comm/shm_collectives.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// A sharded collective's tensors: defined, contiguous, of one dtype and device, `whole` world_size
// times `shard`'s elements.
absl::Status CheckShards(absl::string_view what, const at::Tensor& whole,
                         absl::string_view whole_name, const at::Tensor& shard,
                         absl::string_view shard_name, int world_size) {
  if (!whole.defined() || !shard.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the ", whole_name, " and the ",
                                                   shard_name, " must be defined tensors"));
  }
  if (whole.scalar_type() != shard.scalar_type() || whole.device() != shard.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the ", whole_name, " is ", DTypeName(whole.scalar_type()), " on ",
        whole.device().str(), " but the ", shard_name, " is ", DTypeName(shard.scalar_type()),
        " on ", shard.device().str(), "; they must be of one dtype on one device"));
  }
  if (!whole.is_contiguous() || !shard.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the ", whole_name, " and the ", shard_name, " must be contiguous"));
  }
  if (whole.numel() != shard.numel() * world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the ", whole_name, " has ", whole.numel(), " elements; it must have world_size (",
        world_size, ") times the ", shard_name, "'s ", shard.numel()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProcessGroup::ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  RETURN_IF_ERROR(CheckShards("reduce_scatter", input, "input", output, "output", world_size()));
  const CallSignature call = Signature("reduce_scatter", input, op);
  return Recorded(call, [&]() -> absl::Status {
    if (impl_->shm && impl_->SumsInSharedMemory(input, op)) {
      const int divisor = op == ReduceOp::kMean ? world_size() : 1;
      const size_t shard = static_cast<size_t>(output.numel());
      return input.scalar_type() == at::kFloat
                 ? impl_->shm->ReduceScatterFloat(input.const_data_ptr<float>(),
                                                  output.data_ptr<float>(), shard, divisor, call)
                 : impl_->shm->ReduceScatterDouble(input.const_data_ptr<double>(),
                                                   output.data_ptr<double>(), shard, divisor, call);
    }
    RETURN_IF_ERROR(CheckAgreement(call, input));
    return Guarded("reduce_scatter", [&] {
      // The backend may reduce in its input: a copy (on the backend's device) keeps the caller's.
      at::Tensor staged_input = input.to(impl_->device, /*non_blocking=*/false, /*copy=*/true);
      impl_->OnDevice(output, [&](at::Tensor& out) {
        c10d::ReduceScatterOptions opts;
        opts.reduceOp = ToC10dOp(op);
        opts.timeout = impl_->timeout;
        // Flat, as the backends split them (into world_size chunks of the output's shape).
        at::Tensor flat_out = out.view({-1});
        at::Tensor flat_in = staged_input.view({-1});
        impl_->group->_reduce_scatter_base(flat_out, flat_in, opts)->wait();
        if (op == ReduceOp::kMean) DivideForMean(out, world_size());
      });
    });
  });
}

absl::Status ProcessGroup::AllGatherInto(const at::Tensor& input, at::Tensor& output) {
  RETURN_IF_ERROR(CheckShards("all_gather", output, "output", input, "input", world_size()));
  const CallSignature call = Signature("all_gather_into", input);
  return Recorded(call, [&]() -> absl::Status {
    if (AllGathersInSharedMemory(static_cast<int64_t>(input.nbytes()), input.device().is_cpu())) {
      return impl_->shm->AllGather(input.const_data_ptr(), input.nbytes(), output.data_ptr(), call);
    }
    RETURN_IF_ERROR(CheckAgreement(call, input));
    return Guarded("all_gather_into", [&] {
      at::Tensor staged_input = input.to(impl_->device);
      impl_->OnDevice(output, [&](at::Tensor& out) {
        c10d::AllgatherOptions opts;
        opts.timeout = impl_->timeout;
        at::Tensor flat_out = out.view({-1});
        at::Tensor flat_in = staged_input.view({-1});
        impl_->group->_allgather_base(flat_out, flat_in, opts)->wait();
      });
    });
  });
}

bool ProcessGroup::AllGathersInSharedMemory(int64_t input_bytes, bool on_cpu) const {
  return impl_->shm && on_cpu && static_cast<size_t>(input_bytes) <= impl_->shm->capacity();
}

absl::StatusOr<std::unique_ptr<PendingWork>> ProcessGroup::StartAllGatherInto(
    const at::Tensor& input, at::Tensor& output) {
  if (AllGathersInSharedMemory(static_cast<int64_t>(input.nbytes()), input.device().is_cpu())) {
    RETURN_IF_ERROR(AllGatherInto(input, output));
    auto done = std::make_unique<PendingWork::Impl>();
    done->name = "all_gather_into";
    done->tensor = output;
    done->done = true;
    return std::unique_ptr<PendingWork>(new PendingWork(std::move(done)));
  }
  RETURN_IF_ERROR(CheckShards("all_gather", output, "output", input, "input", world_size()));
  const CallSignature call = Signature("all_gather_into", input);
  // Recorded from here until Wait() ends it.
  const uint64_t seq = impl_->recorder->Start(call);
  if (absl::Status agreed = CheckAgreement(call, input); !agreed.ok()) {
    return FinishRecorded(seq, std::move(agreed));
  }
  auto pending = std::make_unique<PendingWork::Impl>();
  pending->name = "all_gather_into";
  pending->tensor = output;
  pending->blocked_ns = &impl_->blocked_ns;
  pending->finish = [this, seq](absl::Status status) {
    return FinishRecorded(seq, std::move(status));
  };
  absl::Status started = Guarded("all_gather_into", [&] {
    pending->source = input.to(impl_->device);
    if (output.device() != impl_->device) pending->staged = at::empty_like(output, impl_->device);
    at::Tensor flat_out = (pending->staged.defined() ? pending->staged : output).view({-1});
    at::Tensor flat_in = pending->source.view({-1});
    c10d::AllgatherOptions opts;
    opts.timeout = impl_->timeout;
    pending->work = impl_->group->_allgather_base(flat_out, flat_in, opts);
  });
  if (!started.ok()) return pending->finish(started);
  return std::unique_ptr<PendingWork>(new PendingWork(std::move(pending)));
}

absl::Status ProcessGroup::ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                                         ReduceOp op) {
  if (count == 0) return absl::OkStatus();
  at::Tensor out = WrapBuffer(output, count, dtype);
  return ReduceScatter(WrapBuffer(input, count * static_cast<size_t>(world_size()), dtype), out,
                       op);
}

absl::Status ProcessGroup::AllGather(const void* data, size_t count, DType dtype, void* out) {
  if (count == 0) return absl::OkStatus();
  at::Tensor output = WrapBuffer(out, count * static_cast<size_t>(world_size()), dtype);
  return AllGatherInto(WrapBuffer(data, count, dtype), output);
}

}  // namespace ddpspawn
