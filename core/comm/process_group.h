// A c10d process group joined from the cluster environment, and the collectives on it. Every
// collective returns an error (never hangs past the group's timeout, never throws): a timeout is
// DeadlineExceeded, a failed peer or transport is Internal. The header keeps LibTorch out: tensors
// are only forward-declared.
#ifndef DDPSPAWN_CORE_COMM_PROCESS_GROUP_H_
#define DDPSPAWN_CORE_COMM_PROCESS_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/comm/arrival_report.h"
#include "core/env/cluster_environment.h"
#include "core/trace/call_signature.h"

namespace at {
class Tensor;
}  // namespace at

namespace ddpspawn {

enum class DType { kFloat32, kFloat64, kInt32, kInt64 };
enum class ReduceOp { kSum, kMean, kMin, kMax, kProduct };
// How the ranks talk: Gloo (CPU tensors; TCP, or shared memory within a host) or NCCL (CUDA).
enum class Backend { kGloo, kNccl };

// The names used at the CLI and the C ABI: "sum", "mean" (or "avg"), "min", "max", "product".
absl::string_view ReduceOpName(ReduceOp op);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);
// "gloo", "nccl".
absl::string_view BackendName(Backend backend);
absl::StatusOr<Backend> ParseBackend(absl::string_view name);

size_t DTypeSize(DType dtype);

struct GroupOptions {
  Backend backend = Backend::kGloo;
  absl::Duration timeout = kDefaultTimeout;
  // Every collective is first compared across ranks (kind, dtype, count, op, root; a mismatch is an
  // error naming each rank's call, where Gloo would hang or abort a rank): through shared memory
  // for free, or with one small all-gather on CPU. This also checks all-reduces in flight (DDP's)
  // without shared memory, and NCCL's collectives, which costs a GPU sync each. Also on when
  // DDPSPAWN_DEBUG=1.
  bool debug_checks = false;
  // Off skips the comparison on every path (debug_checks aside). Only for measuring what it costs
  // (tools/bench): without it a mismatched call goes through silently on shared memory and hangs or
  // aborts a rank on Gloo.
  bool check_calls = true;
  // nccl: this rank's CUDA device; -1: the local rank's index.
  int device_index = -1;
  // The group's number in the job (its store file, key prefix, shared memory and flight records):
  // -1 takes the next of this process's count, which agrees across ranks that join the same groups
  // in the same order. Ranks that did not (an elastic job's replacement, which joins later) name
  // it: the count then goes on above it.
  int generation = -1;
};

// A collective in flight (see ProcessGroup::StartAllReduce). Not thread-safe: one thread at a time
// waits for it (DDP's reducer starts and waits under its mutex, perhaps on different threads).
// Ownership: it holds the tensor and the c10d work, and its destructor waits for a collective still
// in flight; the group that started it must outlive it.
class PendingWork {
 public:
  ~PendingWork();
  // Waits for the collective; afterwards the tensor holds the result.
  absl::Status Wait();

 private:
  friend class ProcessGroup;
  struct Impl;
  explicit PendingWork(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when this build of LibTorch has the NCCL backend.
bool NcclAvailable();
// CUDA devices visible to this process (0 without a CUDA build or a GPU).
int CudaDeviceCount();

// Thread safety: thread-compatible. Collectives must reach the group in the same order on every
// rank, so a rank issues them from one thread at a time (DDP's reducer issues its bucket
// all-reduces under its own mutex); the const accessors may be called from any thread. Ownership:
// owns its c10d backend, store and shared memory; the PendingWork it returns, and the reducers and
// hooks that keep a pointer to it, must not outlive it.
class ProcessGroup {
 public:
  // Joins the group every rank of `cluster` joins. All ranks must call this the same number of
  // times in the same order.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(const ClusterInfo& cluster,
                                                              const GroupOptions& options = {});
  ~ProcessGroup();

  const ClusterInfo& cluster() const { return cluster_; }
  int rank() const { return cluster_.rank; }
  int world_size() const { return cluster_.world_size; }
  Backend backend() const { return options_.backend; }
  // True when float sums and small broadcasts go through shared memory (a launcher's ranks, unless
  // DDPSPAWN_SHM_ALLREDUCE=0 or /dev/shm is full).
  bool uses_shared_memory() const;
  // Who arrived last at this group's collectives, and by how much, so far (any thread): measured
  // where the ranks meet in one host's shared memory; otherwise the report says why it is not.
  ArrivalReport arrivals() const;
  // Seconds this rank has spent inside collectives (blocking ones, and waits for those in flight):
  // the ranks that wait least are the ones the others wait for. Any thread. Meaningless on nccl,
  // whose waits do not block the host.
  double blocked_seconds() const;

  // Waits until every rank reached the barrier; `name` appears in errors.
  absl::Status Barrier(absl::string_view name = "");

  // Tensors (CPU, contiguous; on CUDA for nccl). Reductions happen in place.
  absl::Status Broadcast(at::Tensor& tensor, int src);
  absl::Status AllReduce(at::Tensor& tensor, ReduceOp op);
  // Only `dst`'s tensor changes.
  absl::Status Reduce(at::Tensor& tensor, ReduceOp op, int dst);
  // One tensor per rank, in rank order.
  absl::StatusOr<std::vector<at::Tensor>> AllGather(const at::Tensor& tensor);
  // Reduce-scatter (torch's reduce_scatter_tensor): `input` holds world_size equal chunks in rank
  // order, and `output` (contiguous, input.numel() / world_size elements, same dtype and device)
  // gets chunk rank() of `op` over every rank's input; `input` is not changed. Through this host's
  // shared memory for float sums and means where the ranks have it.
  absl::Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op);
  // All-gather into one tensor (torch's all_gather_into_tensor): `output` (contiguous, world_size
  // times input.numel() elements, same dtype and device) gets every rank's `input` in rank order.
  absl::Status AllGatherInto(const at::Tensor& input, at::Tensor& output);
  // AllGatherInto, started and returned at once (FSDP's prefetch of the next unit): `input` and
  // `output` must stay alive and untouched until Wait(). Through shared memory it is done when it
  // returns (AllGathersInSharedMemory()); on Gloo and NCCL it runs beside the caller.
  absl::StatusOr<std::unique_ptr<PendingWork>> StartAllGatherInto(const at::Tensor& input,
                                                                  at::Tensor& output);
  // True when an all-gather of `input_bytes` a rank (CPU tensors when `on_cpu`) runs through this
  // host's shared memory, on the calling thread (so starting it early overlaps nothing).
  bool AllGathersInSharedMemory(int64_t input_bytes, bool on_cpu) const;
  // Starts an all-reduce and returns at once; `tensor` must stay alive and untouched until Wait().
  // Collectives are matched across ranks by the order they start in. A tensor on another device
  // than the backend's (a CPU buffer on NCCL, a CUDA tensor on Gloo) is copied there now and back
  // at Wait().
  absl::StatusOr<std::unique_ptr<PendingWork>> StartAllReduce(at::Tensor& tensor, ReduceOp op);
  // StartAllReduce among this node's ranks only (kSum, or kMean over them): local SGD's gradient
  // average within each node. On a job of one node that is every rank, on nodes of one rank nothing
  // to do; on a ddpspawn launcher's job of several nodes it sums a CPU float or double tensor
  // through the node's shared memory and is done when it returns. Elsewhere CheckNodeAllReduce()'s
  // error.
  absl::StatusOr<std::unique_ptr<PendingWork>> StartNodeAllReduce(at::Tensor& tensor, ReduceOp op);
  // OK where StartNodeAllReduce() can run; else Unimplemented saying why (the same answer on every
  // rank).
  absl::Status CheckNodeAllReduce() const;

  // A zeroed 1-D buffer of `like`'s dtype and device for repeated all-reduces (DDP's gradient
  // buckets). Where float sums go through shared memory, it lives there and its sums need no copy.
  // Every rank must call this in the same order with the same size; it outlives the group safely.
  absl::StatusOr<at::Tensor> NewReductionBuffer(int64_t elements, const at::Tensor& like);

  // The same on plain buffers of `count` elements (count 0 is a no-op).
  absl::Status Broadcast(void* data, size_t count, DType dtype, int src);
  absl::Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op);
  absl::Status Reduce(void* data, size_t count, DType dtype, ReduceOp op, int dst);
  // `out` holds world_size * count elements (AllGatherInto).
  absl::Status AllGather(const void* data, size_t count, DType dtype, void* out);
  // `input` holds world_size * count elements, `output` count (ReduceScatter).
  absl::Status ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                             ReduceOp op);

  // Byte strings of any size (objects serialized by the caller).
  absl::StatusOr<std::string> BroadcastBytes(absl::string_view bytes, int src);
  absl::StatusOr<std::vector<std::string>> AllGatherBytes(absl::string_view bytes);
  // Every rank's bytes, in rank order, on `to` alone (torch's gather_object): the other ranks get
  // an empty vector and hold no more than their own bytes.
  absl::StatusOr<std::vector<std::string>> GatherBytes(absl::string_view bytes, int to);

 private:
  struct Impl;
  ProcessGroup(ClusterInfo cluster, GroupOptions options, std::unique_ptr<Impl> impl);
  absl::Status CheckRank(int rank, absl::string_view what) const;
  // Runs `body` as collective `call` in the flight recorder; on a timeout the error says what every
  // rank was last doing.
  absl::Status Recorded(const CallSignature& call, const std::function<absl::Status()>& body);
  // Ends call `seq`'s record and returns `status`, with the ranks' last calls added to a timeout.
  absl::Status FinishRecorded(uint64_t seq, absl::Status status);
  absl::Status ReduceOnBackend(at::Tensor& tensor, ReduceOp op, int dst);
  // Compares what every rank is about to run; any difference is an error on every rank naming each
  // rank's call. Through shared memory where the group has it (free); else one small all-gather, on
  // CPU groups always (but not for an all-reduce `in_flight`, DDP's), on NCCL with debug_checks.
  absl::Status CheckAgreement(const CallSignature& call, const at::Tensor& tensor,
                              bool in_flight = false);

  ClusterInfo cluster_;
  GroupOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_PROCESS_GROUP_H_
