// ProcessGroup's and PendingWork's state and the helpers their files share: the group's creation
// (process_group.cc), its blocking collectives (process_group_collectives.cc) and those it starts
// (pending_work.cc). Private to core/comm.
#ifndef DDPSPAWN_CORE_COMM_PROCESS_GROUP_IMPL_H_
#define DDPSPAWN_CORE_COMM_PROCESS_GROUP_IMPL_H_

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/comm/hierarchical_all_reduce.h"
#include "core/comm/process_group.h"
#include "core/comm/shm_collectives.h"
#include "core/trace/call_signature.h"
#include "core/trace/flight_recorder.h"

namespace ddpspawn {

inline c10d::ReduceOp ToC10dOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:  // Gloo has no AVG: sum, then divide
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

inline at::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return at::kFloat;
    case DType::kFloat64:
      return at::kDouble;
    case DType::kInt32:
      return at::kInt;
    case DType::kInt64:
      return at::kLong;
  }
  return at::kFloat;
}

// A 1-D CPU tensor over a caller's buffer of `count` elements (not copied).
inline at::Tensor WrapBuffer(const void* data, size_t count, DType dtype) {
  return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(count)},
                       at::TensorOptions().dtype(ToScalarType(dtype)));
}

inline void DivideForMean(at::Tensor& tensor, int world_size) {
  if (at::isIntegralType(tensor.scalar_type(), /*includeBool=*/false)) {
    tensor.div_(world_size, "trunc");
  } else {
    tensor.div_(world_size);
  }
}

// Python's names of the dtypes, for the messages.
inline absl::string_view DTypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

// What this rank is about to run; `tensor` may be undefined (a barrier).
inline CallSignature Signature(absl::string_view kind, const at::Tensor& tensor,
                               std::optional<ReduceOp> op = std::nullopt, int root = -1) {
  CallSignature call;
  call.kind = kind;
  if (tensor.defined()) {
    call.dtype = DTypeName(tensor.scalar_type());
    call.count = static_cast<uint64_t>(tensor.numel());
  }
  if (op.has_value()) call.op = ReduceOpName(*op);
  call.root = root;
  call.backward_passes = ScopedBackwardPasses::Current();
  return call;
}

// Adds the time from its construction to its destruction to `*total_ns` (nothing when null).
class BlockedTimer {
 public:
  explicit BlockedTimer(std::atomic<int64_t>* total_ns)
      : total_ns_(total_ns), start_(std::chrono::steady_clock::now()) {}
  ~BlockedTimer() {
    if (total_ns_ == nullptr) return;
    total_ns_->fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start_)
                             .count(),
                         std::memory_order_relaxed);
  }
  BlockedTimer(const BlockedTimer&) = delete;
  BlockedTimer& operator=(const BlockedTimer&) = delete;

 private:
  std::atomic<int64_t>* const total_ns_;
  const std::chrono::steady_clock::time_point start_;
};

struct PendingWork::Impl {
  const char* name = "all_reduce";  // the collective, in errors
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor tensor;
  // The copy on the backend's device when `tensor` lives elsewhere (a CPU buffer on NCCL, a CUDA
  // tensor on Gloo); copied back at Wait().
  at::Tensor staged;
  at::Tensor source;  // an all-gather's input on the backend's device, alive while in flight
  int divide_by = 1;  // mean: sum, then divide
  bool done = false;  // completed at start (shared memory), not yet waited for
  // Hierarchical: the leader's sum between the nodes, which must reach the node's ranks (at Wait(),
  // else when this is destroyed).
  std::shared_ptr<HierarchicalAllReduce> hierarchical;
  std::optional<HierarchicalAllReduce::InFlight> in_flight;
  // Ends the call's flight record; returns the status to report.
  std::function<absl::Status(absl::Status)> finish;
  // The group's time blocked in collectives, to which Wait() adds its own.
  std::atomic<int64_t>* blocked_ns = nullptr;
};

// Owned by its ProcessGroup; used from the thread that issues the group's collectives (blocked_ns
// also from PendingWork::Wait).
struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Backend> group;  // Gloo or NCCL
  // Time this rank spent inside collectives (blocking ones, and waits for those in flight):
  // ProcessGroup::blocked_seconds().
  std::atomic<int64_t> blocked_ns{0};
  // Ranks of a ddpspawn launcher share a host: float sums and small broadcasts go through shared
  // memory.
  std::unique_ptr<SharedMemoryCollectives> shm;
  // A launcher's job of several nodes: float sums through shared memory in each node and Gloo
  // between the nodes.
  std::shared_ptr<HierarchicalAllReduce> hierarchical;
  // Every collective of this rank, numbered (see flight_recorder.h).
  std::unique_ptr<FlightRecorder> recorder;
  int generation = 0;  // of this group in this process

  // The shared memory that sums: this host's ranks', or this node's (hierarchical); null: none.
  SharedMemoryCollectives* SumMemory() {
    if (shm) return shm.get();
    return hierarchical ? &hierarchical->node() : nullptr;
  }

  // True when `tensor`'s sum goes through SumMemory(): the same answer on every rank for the same
  // call.
  bool SumsInSharedMemory(const at::Tensor& tensor, ReduceOp op) {
    SharedMemoryCollectives* memory = SumMemory();
    return memory != nullptr && (op == ReduceOp::kSum || op == ReduceOp::kMean) &&
           tensor.device().is_cpu() && tensor.is_contiguous() &&
           (tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble) &&
           (tensor.nbytes() <= memory->capacity() ||
            memory->IsShared(tensor.data_ptr(), tensor.nbytes()));
  }

  // Sums (or averages) `tensor` through this host's shared memory when it qualifies; false: use
  // Gloo (or the hierarchical path).
  bool TryShm(at::Tensor& tensor, ReduceOp op, int world_size, const CallSignature& call,
              absl::Status* status) {
    if (!shm || !SumsInSharedMemory(tensor, op)) return false;
    const int divisor = op == ReduceOp::kMean ? world_size : 1;
    *status = tensor.scalar_type() == at::kFloat
                  ? shm->SumFloat(tensor.data_ptr<float>(), tensor.numel(), divisor, call)
                  : shm->SumDouble(tensor.data_ptr<double>(), tensor.numel(), divisor, call);
    return true;
  }
  std::chrono::milliseconds timeout;
  // Where tensors must live for this backend: CPU for gloo, this rank's GPU for nccl.
  at::Device device = at::kCPU;

  // Runs a collective on `tensor` (moved to the backend's device and back if needed).
  template <typename Collective>
  void OnDevice(at::Tensor& tensor, Collective&& collective) {
    if (tensor.device() == device) {
      collective(tensor);
      return;
    }
    at::Tensor staged = tensor.to(device);
    collective(staged);
    tensor.copy_(staged);
  }

  // Creates a Gloo group through `store`, then joins the shared-memory paths that apply.
  absl::Status JoinGloo(const c10::intrusive_ptr<c10d::PrefixStore>& store,
                        const ClusterInfo& cluster, const GroupOptions& options, bool one_launcher,
                        bool shm_enabled, bool debug);
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_PROCESS_GROUP_IMPL_H_
