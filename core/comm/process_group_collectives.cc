// ProcessGroup's blocking collectives (see process_group.h): each recorded, checked for agreement
// across ranks where asked, and timed while it blocks.
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

namespace ddpspawn {
namespace {

// Broadcasts up to this size go through shared memory: small ones (BatchNorm buffers every step,
// objects) are latency-bound, and Gloo's wake-ups cost milliseconds on busy cores. Larger ones (the
// initial parameters) cost about the same either way, mostly in first touches of new pages, and
// through shared memory they would add the slot's pages to every rank's memory.
constexpr size_t kShmBroadcastMaxBytes = 1 << 20;

}  // namespace

namespace {

// How long a rank whose peer closed the connection waits before returning the error (see
// FinishRecorded).
constexpr absl::Duration kPeerFailureGrace = absl::Seconds(1);

// Gloo's words for a peer that closed or reset its end of a pair.
bool PeerClosedTheConnection(const absl::Status& status) {
  return absl::StrContains(status.message(), "Connection closed by peer") ||
         absl::StrContains(status.message(), "Connection reset by peer");
}

}  // namespace

absl::Status ProcessGroup::Recorded(const CallSignature& call,
                                    const std::function<absl::Status()>& body) {
  const uint64_t seq = impl_->recorder->Start(call);
  absl::Status status;
  {
    const BlockedTimer timer(&impl_->blocked_ns);
    status = body();
  }
  return FinishRecorded(seq, std::move(status));
}

double ProcessGroup::blocked_seconds() const {
  return 1e-9 * static_cast<double>(impl_->blocked_ns.load(std::memory_order_relaxed));
}

absl::Status ProcessGroup::FinishRecorded(uint64_t seq, absl::Status status) {
  impl_->recorder->Finish(seq, status.ok());
  if (!status.ok() && PeerClosedTheConnection(status) && cluster_.kind == ClusterKind::kDdpspawn) {
    // A consequence: the peer failed (or timed out, and Gloo closed the pair) first. Its report,
    // which says why, should reach the launcher before this one, which the launcher would otherwise
    // name as the first failure.
    absl::SleepFor(kPeerFailureGrace);
  }
  if (!absl::IsDeadlineExceeded(status)) return status;
  // A timeout: say which call, and what every rank was last doing.
  std::string text = absl::StrCat(status.message(), "\n(rank ", rank(), "'s call #", seq, ": ",
                                  impl_->recorder->DescribeOwn(seq), ")");
  if (cluster_.kind == ClusterKind::kDdpspawn && !cluster_.store_is_external) {
    absl::StrAppend(&text, "\nwhat every rank was last doing (flight recorder):",
                    DescribeRecordedRanks(
                        ReadFlightRecorders(cluster_.run_dir, world_size(), impl_->generation), seq,
                        absl::Now()));
  }
  return absl::Status(status.code(), text);
}

absl::Status ProcessGroup::CheckRank(int rank, absl::string_view what) const {
  if (rank < 0 || rank >= world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " rank ", rank, " is outside [0, ", world_size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::CheckAgreement(const CallSignature& call, const at::Tensor& tensor,
                                          bool in_flight) {
  if (!options_.check_calls && !options_.debug_checks) return absl::OkStatus();
  if (impl_->shm) return impl_->shm->Agree(call);
  // On NCCL the exchange would wait for the GPU; an all-reduce in flight is DDP's, whose buckets
  // the reducer agreed on when it was built.
  const bool free_enough = impl_->device.is_cpu() && !in_flight;
  if (!options_.debug_checks && !free_enough) return absl::OkStatus();
  // Every rank's call as int64s: its fingerprint, then its shape.
  constexpr int kMaxDims = 8;
  constexpr int kPrintWords = sizeof(CallFingerprint) / sizeof(int64_t);
  constexpr int64_t kRow = kPrintWords + 1 + kMaxDims;
  at::Tensor mine = at::zeros({kRow}, at::kLong);
  const CallFingerprint print = CallFingerprint::Of(call);
  std::memcpy(mine.data_ptr(), &print, sizeof print);
  int64_t* m = mine.data_ptr<int64_t>();
  m[kPrintWords] = tensor.defined() ? tensor.dim() : 0;
  for (int d = 0; d < std::min<int64_t>(m[kPrintWords], kMaxDims); ++d) {
    m[kPrintWords + 1 + d] = tensor.size(d);
  }
  // First one tiny all-reduce: the largest and the smallest hash of the rows (a deterministic one:
  // std::hash of the bytes). Only when they differ are the rows gathered, to name every rank's
  // call.
  const std::string_view bytes(static_cast<const char*>(mine.data_ptr()), mine.nbytes());
  const int64_t hash = static_cast<int64_t>(std::hash<std::string_view>()(bytes) >> 2);
  bool agree = false;
  std::vector<at::Tensor> all;
  absl::Status compared = Guarded(absl::StrCat("comparing the ranks' ", call.kind, " calls"), [&] {
    std::vector<at::Tensor> extremes{
        at::tensor(std::vector<int64_t>{hash, -hash}, at::kLong).to(impl_->device)};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    max.timeout = impl_->timeout;
    impl_->group->allreduce(extremes, max)->wait();
    const at::Tensor found = extremes[0].cpu();
    agree = found[0].item<int64_t>() == -found[1].item<int64_t>();
    if (agree) return;
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < world_size(); ++r) outputs[0].push_back(at::empty_like(mine));
    std::vector<at::Tensor> inputs{mine.to(impl_->device)};
    for (at::Tensor& t : outputs[0]) t = t.to(impl_->device);
    c10d::AllgatherOptions gather;
    gather.timeout = impl_->timeout;
    impl_->group->allgather(outputs, inputs, gather)->wait();
    for (at::Tensor& t : outputs[0]) all.push_back(t.cpu());
  });
  if (!compared.ok()) return compared;
  if (agree) return absl::OkStatus();
  std::vector<std::string> calls;
  std::vector<CallFingerprint> prints;
  for (const at::Tensor& row : all) {
    CallFingerprint theirs;
    std::memcpy(&theirs, row.data_ptr(), sizeof theirs);
    prints.push_back(theirs);
    const int64_t* v = row.data_ptr<int64_t>();
    std::string shape;
    for (int d = 0; d < std::min<int64_t>(v[kPrintWords], kMaxDims); ++d) {
      absl::StrAppend(&shape, d ? ", " : "", v[kPrintWords + 1 + d]);
    }
    calls.push_back(absl::StrCat(Describe(theirs.signature()),
                                 v[kPrintWords] > 0 ? absl::StrCat(" [", shape, "]") : ""));
  }
  return MismatchedCallsError(calls, OnlyBackwardPassesDiffer(prints));
}

absl::Status ProcessGroup::Barrier(absl::string_view name) {
  const CallSignature call = Signature("barrier", at::Tensor());
  return Recorded(call, [&]() -> absl::Status {
    // Through shared memory the check itself is a barrier.
    if (impl_->shm) return impl_->shm->Agree(call);
    RETURN_IF_ERROR(CheckAgreement(call, at::Tensor()));
    return Guarded(absl::StrCat("barrier '", name, "'"), [&] {
      c10d::BarrierOptions opts;
      opts.timeout = impl_->timeout;
      impl_->group->barrier(opts)->wait();
    });
  });
}

absl::Status ProcessGroup::Broadcast(at::Tensor& tensor, int src) {
  RETURN_IF_ERROR(CheckRank(src, "broadcast source"));
  const CallSignature call = Signature("broadcast", tensor, std::nullopt, src);
  return Recorded(call, [&]() -> absl::Status {
    if (impl_->shm && tensor.device().is_cpu() && tensor.is_contiguous() &&
        tensor.nbytes() <= kShmBroadcastMaxBytes) {
      return impl_->shm->Broadcast(tensor.data_ptr(), tensor.nbytes(), src, call);
    }
    RETURN_IF_ERROR(CheckAgreement(call, tensor));
    return Guarded("broadcast", [&] {
      impl_->OnDevice(tensor, [&](at::Tensor& t) {
        std::vector<at::Tensor> tensors{t};
        c10d::BroadcastOptions opts;
        opts.rootRank = src;
        opts.timeout = impl_->timeout;
        impl_->group->broadcast(tensors, opts)->wait();
      });
    });
  });
}

absl::Status ProcessGroup::AllReduce(at::Tensor& tensor, ReduceOp op) {
  const CallSignature call = Signature("all_reduce", tensor, op);
  return Recorded(call, [&]() -> absl::Status {
    absl::Status shm_status;
    if (impl_->TryShm(tensor, op, world_size(), call, &shm_status)) return shm_status;
    RETURN_IF_ERROR(CheckAgreement(call, tensor));
    if (impl_->hierarchical && impl_->SumsInSharedMemory(tensor, op)) {
      ASSIGN_OR_RETURN(
          HierarchicalAllReduce::InFlight sum,
          impl_->hierarchical->Start(tensor, op == ReduceOp::kMean ? world_size() : 1, call));
      return impl_->hierarchical->Finish(sum);
    }
    return Guarded("all_reduce", [&] {
      impl_->OnDevice(tensor, [&](at::Tensor& t) {
        std::vector<at::Tensor> tensors{t};
        c10d::AllreduceOptions opts;
        opts.reduceOp = ToC10dOp(op);
        opts.timeout = impl_->timeout;
        impl_->group->allreduce(tensors, opts)->wait();
        if (op == ReduceOp::kMean) DivideForMean(t, world_size());
      });
    });
  });
}

absl::Status ProcessGroup::Reduce(at::Tensor& tensor, ReduceOp op, int dst) {
  RETURN_IF_ERROR(CheckRank(dst, "reduce destination"));
  const CallSignature call = Signature("reduce", tensor, op, dst);
  return Recorded(call, [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckAgreement(call, tensor));
    return ReduceOnBackend(tensor, op, dst);
  });
}

absl::Status ProcessGroup::ReduceOnBackend(at::Tensor& tensor, ReduceOp op, int dst) {
  return Guarded("reduce", [&] {
    // Gloo may use a non-root rank's tensor as scratch space: reduce a copy there.
    at::Tensor target = rank() == dst ? tensor : tensor.clone();
    impl_->OnDevice(target, [&](at::Tensor& t) {
      std::vector<at::Tensor> tensors{t};
      c10d::ReduceOptions opts;
      opts.reduceOp = ToC10dOp(op);
      opts.rootRank = dst;
      opts.timeout = impl_->timeout;
      impl_->group->reduce(tensors, opts)->wait();
      if (op == ReduceOp::kMean && rank() == dst) DivideForMean(t, world_size());
    });
  });
}

absl::StatusOr<std::vector<at::Tensor>> ProcessGroup::AllGather(const at::Tensor& tensor) {
  const CallSignature call = Signature("all_gather", tensor);
  std::vector<at::Tensor> gathered;
  absl::Status status = Recorded(call, [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckAgreement(call, tensor));
    return Guarded("all_gather", [&] {
      at::Tensor input = tensor.to(impl_->device).contiguous();
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world_size(); ++r) outputs[0].push_back(at::empty_like(input));
      std::vector<at::Tensor> inputs{input};
      c10d::AllgatherOptions opts;
      opts.timeout = impl_->timeout;
      impl_->group->allgather(outputs, inputs, opts)->wait();
      for (at::Tensor& t : outputs[0]) gathered.push_back(t.to(tensor.device()));
    });
  });
  if (!status.ok()) return status;
  return gathered;
}

absl::Status ProcessGroup::Broadcast(void* data, size_t count, DType dtype, int src) {
  if (count == 0) return CheckRank(src, "broadcast source");
  at::Tensor tensor = WrapBuffer(data, count, dtype);
  return Broadcast(tensor, src);
}

absl::Status ProcessGroup::AllReduce(void* data, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return absl::OkStatus();
  at::Tensor tensor = WrapBuffer(data, count, dtype);
  return AllReduce(tensor, op);
}

absl::Status ProcessGroup::Reduce(void* data, size_t count, DType dtype, ReduceOp op, int dst) {
  if (count == 0) return CheckRank(dst, "reduce destination");
  at::Tensor tensor = WrapBuffer(data, count, dtype);
  return Reduce(tensor, op, dst);
}

absl::StatusOr<std::string> ProcessGroup::BroadcastBytes(absl::string_view bytes, int src) {
  int64_t size = rank() == src ? static_cast<int64_t>(bytes.size()) : 0;
  RETURN_IF_ERROR(Broadcast(&size, 1, DType::kInt64, src));
  std::string out(static_cast<size_t>(size), '\0');
  if (rank() == src) out.assign(bytes.data(), bytes.size());
  if (size == 0) return out;
  at::Tensor tensor = at::from_blob(out.data(), {size}, at::kByte);
  RETURN_IF_ERROR(Broadcast(tensor, src));
  return out;
}

absl::StatusOr<std::vector<std::string>> ProcessGroup::GatherBytes(absl::string_view bytes,
                                                                   int to) {
  RETURN_IF_ERROR(CheckRank(to, "gather destination"));
  std::vector<int64_t> sizes(static_cast<size_t>(world_size()));
  int64_t own_size = static_cast<int64_t>(bytes.size());
  RETURN_IF_ERROR(AllGather(&own_size, 1, DType::kInt64, sizes.data()));
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::string> out;
  if (rank() == to) out.resize(sizes.size());
  if (longest == 0) return out;
  at::Tensor padded = at::zeros({longest}, at::kByte);
  if (!bytes.empty()) std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
  const CallSignature call = Signature("gather", padded, std::nullopt, to);
  std::vector<at::Tensor> gathered;
  RETURN_IF_ERROR(Recorded(call, [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckAgreement(call, padded));
    return Guarded("gather", [&] {
      std::vector<at::Tensor> inputs{padded.to(impl_->device)};
      std::vector<std::vector<at::Tensor>> outputs;
      if (rank() == to) {
        outputs.resize(1);
        for (int r = 0; r < world_size(); ++r) outputs[0].push_back(at::empty_like(inputs[0]));
      }
      c10d::GatherOptions opts;
      opts.rootRank = to;
      opts.timeout = impl_->timeout;
      impl_->group->gather(outputs, inputs, opts)->wait();
      if (rank() == to) {
        for (at::Tensor& t : outputs[0]) gathered.push_back(t.cpu());
      }
    });
  }));
  for (size_t r = 0; r < gathered.size(); ++r) {
    out[r].assign(static_cast<const char*>(gathered[r].data_ptr()), static_cast<size_t>(sizes[r]));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ProcessGroup::AllGatherBytes(absl::string_view bytes) {
  std::vector<int64_t> sizes(static_cast<size_t>(world_size()));
  int64_t own_size = static_cast<int64_t>(bytes.size());
  RETURN_IF_ERROR(AllGather(&own_size, 1, DType::kInt64, sizes.data()));
  int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::string> out(sizes.size());
  if (longest == 0) return out;
  at::Tensor padded = at::zeros({longest}, at::kByte);
  if (!bytes.empty()) std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
  ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, AllGather(padded));
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].assign(static_cast<const char*>(gathered[r].data_ptr()), static_cast<size_t>(sizes[r]));
  }
  return out;
}

}  // namespace ddpspawn
