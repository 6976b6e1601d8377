// The collectives a ProcessGroup starts and a PendingWork finishes (see process_group.h): the
// gradient all-reduces that overlap backward.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/comm/connection_check.h"
#include "core/comm/cuda/cuda_support.h"
#include "core/comm/group_join.h"
#include "core/comm/guarded.h"
#include "core/comm/hierarchical_all_reduce.h"
#include "core/comm/process_group.h"
#include "core/comm/process_group_impl.h"
#include "core/comm/shm_collectives.h"
#include "core/env/run_dir.h"
#include "core/env/settings.h"
#include "core/trace/flight_recorder.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"
#include "core/util/tensor_memory.h"

namespace ddpspawn {

PendingWork::PendingWork(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PendingWork::~PendingWork() {
  // A collective still in flight must finish before its tensor goes away; a hierarchical one also
  // ends on the node's other ranks, which wait for it.
  if (impl_ && impl_->work) {
    try {
      impl_->work->wait();
    } catch (...) {
    }
  }
  if (impl_ && impl_->in_flight) impl_->hierarchical->Finish(*impl_->in_flight).IgnoreError();
}

absl::Status PendingWork::Wait() {
  if (impl_->done) {  // finished when it started (shared memory)
    impl_->done = false;
    return absl::OkStatus();
  }
  if (!impl_->work && !impl_->in_flight) {
    return absl::FailedPreconditionError("already waited for");
  }
  absl::Status status = absl::OkStatus();
  const BlockedTimer timer(impl_->blocked_ns);
  if (impl_->work) {
    status = Guarded(impl_->name, [&] {
      impl_->work->wait();
      at::Tensor& reduced = impl_->staged.defined() ? impl_->staged : impl_->tensor;
      if (impl_->divide_by > 1) DivideForMean(reduced, impl_->divide_by);
      if (impl_->staged.defined()) impl_->tensor.copy_(impl_->staged);
    });
    impl_->work.reset();
  }
  if (impl_->in_flight) {
    status = impl_->hierarchical->Finish(*impl_->in_flight);
    impl_->in_flight.reset();
  }
  return impl_->finish ? impl_->finish(status) : status;
}

absl::StatusOr<std::unique_ptr<PendingWork>> ProcessGroup::StartAllReduce(at::Tensor& tensor,
                                                                          ReduceOp op) {
  const CallSignature call = Signature("all_reduce", tensor, op);
  auto pending = std::make_unique<PendingWork::Impl>();
  pending->tensor = tensor;
  pending->divide_by = op == ReduceOp::kMean ? world_size() : 1;
  absl::Status shm_status;
  // Recorded from here until it ends: now through shared memory, or at Wait().
  const uint64_t seq = impl_->recorder->Start(call);
  pending->blocked_ns = &impl_->blocked_ns;
  bool summed;
  {
    const BlockedTimer timer(&impl_->blocked_ns);  // a sum in shared memory ends here
    summed = impl_->TryShm(tensor, op, world_size(), call, &shm_status);
  }
  if (summed) {  // done already
    shm_status = FinishRecorded(seq, std::move(shm_status));
    if (!shm_status.ok()) return shm_status;
    pending->divide_by = 1;
    pending->done = true;
    return std::unique_ptr<PendingWork>(new PendingWork(std::move(pending)));
  }
  if (absl::Status s = CheckAgreement(call, tensor, /*in_flight=*/true); !s.ok()) {
    return FinishRecorded(seq, std::move(s));
  }
  pending->finish = [this, seq](absl::Status status) {
    return FinishRecorded(seq, std::move(status));
  };
  if (impl_->hierarchical && impl_->SumsInSharedMemory(tensor, op)) {
    absl::StatusOr<HierarchicalAllReduce::InFlight> sum =
        impl_->hierarchical->Start(tensor, pending->divide_by, call);
    if (!sum.ok()) return pending->finish(sum.status());
    pending->hierarchical = impl_->hierarchical;
    pending->in_flight = *std::move(sum);
    pending->divide_by = 1;
    return std::unique_ptr<PendingWork>(new PendingWork(std::move(pending)));
  }
  absl::Status started = Guarded("all_reduce", [&] {
    if (tensor.device() != impl_->device) {
      pending->staged = tensor.to(impl_->device);
    }
    std::vector<at::Tensor> tensors{pending->staged.defined() ? pending->staged : tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = ToC10dOp(op);
    opts.timeout = impl_->timeout;
    pending->work = impl_->group->allreduce(tensors, opts);
  });
  if (!started.ok()) return pending->finish(started);
  return std::unique_ptr<PendingWork>(new PendingWork(std::move(pending)));
}

absl::Status ProcessGroup::CheckNodeAllReduce() const {
  if (cluster_.local_world_size == cluster_.world_size || cluster_.local_world_size == 1 ||
      impl_->hierarchical) {
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "an all-reduce within each node needs the node's ranks to meet in shared memory, as a "
      "ddpspawn launcher's ranks do on each node of a job of several nodes (with gloo); this "
      "job's ",
      cluster_.world_size, " ranks span nodes of ", cluster_.local_world_size,
      " ranks that do not (torchrun, SLURM, nccl, or DDPSPAWN_SHM_ALLREDUCE=0)"));
}

absl::StatusOr<std::unique_ptr<PendingWork>> ProcessGroup::StartNodeAllReduce(at::Tensor& tensor,
                                                                              ReduceOp op) {
  RETURN_IF_ERROR(CheckNodeAllReduce());
  auto done = [&] {  // the node's sum is already in `tensor`
    auto pending = std::make_unique<PendingWork::Impl>();
    pending->tensor = tensor;
    pending->done = true;
    return std::unique_ptr<PendingWork>(new PendingWork(std::move(pending)));
  };
  if (cluster_.local_world_size == cluster_.world_size) return StartAllReduce(tensor, op);
  if (cluster_.local_world_size == 1) return done();  // a node of one rank
  if (!impl_->SumsInSharedMemory(tensor, op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an all-reduce within a node sums (or averages) contiguous CPU float32 or float64 "
        "tensors in shared memory, of at most ",
        impl_->hierarchical->node().capacity(), " bytes unless allocated there; rank ", rank(),
        " has a ", ReduceOpName(op), " of ", DTypeName(tensor.scalar_type()), " on ",
        tensor.device().str(), " (", tensor.nbytes(), " bytes)"));
  }
  const CallSignature call = Signature("node_all_reduce", tensor, op);
  SharedMemoryCollectives& node = impl_->hierarchical->node();
  const int divisor = op == ReduceOp::kMean ? cluster_.local_world_size : 1;
  RETURN_IF_ERROR(Recorded(call, [&]() -> absl::Status {
    const BlockedTimer timer(&impl_->blocked_ns);
    return tensor.scalar_type() == at::kFloat
               ? node.SumFloat(tensor.data_ptr<float>(), tensor.numel(), divisor, call)
               : node.SumDouble(tensor.data_ptr<double>(), tensor.numel(), divisor, call);
  }));
  return done();
}

absl::StatusOr<at::Tensor> ProcessGroup::NewReductionBuffer(int64_t elements,
                                                            const at::Tensor& like) {
  const at::TensorOptions options = like.options().requires_grad(false);
  at::Tensor buffer;
  absl::Status failed = absl::OkStatus();
  absl::Status status = Guarded("allocating a reduction buffer", [&] {
    const bool eligible = impl_->SumMemory() != nullptr && options.device().is_cpu() &&
                          (options.dtype() == at::kFloat || options.dtype() == at::kDouble);
    if (eligible) {
      // The same outcome on every rank: a sum is in place on all ranks or staged on all.
      const size_t bytes = static_cast<size_t>(elements) * options.dtype().itemsize();
      absl::StatusOr<std::shared_ptr<void>> memory =
          impl_->shm ? impl_->shm->AllocateShared(bytes)
                     : impl_->hierarchical->AllocateShared(bytes);
      if (memory.ok()) {
        std::shared_ptr<void> keep = *std::move(memory);
        CountExternalTensorBytes(static_cast<int64_t>(bytes));  // the allocator never sees it
        buffer = at::from_blob(
            keep.get(), {elements},
            [keep, bytes](void*) mutable {
              keep.reset();
              CountExternalTensorBytes(-static_cast<int64_t>(bytes));
            },
            options);
        return;
      }
      // /dev/shm too small: ordinary memory. Anything else is the caller's.
      if (!absl::IsResourceExhausted(memory.status()) && !absl::IsUnavailable(memory.status())) {
        failed = memory.status();
        return;
      }
    }
    buffer = at::zeros({elements}, options);
  });
  if (!status.ok()) return status;
  if (!failed.ok()) return failed;
  return buffer;
}

}  // namespace ddpspawn
