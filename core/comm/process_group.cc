// c10d process groups and collectives with Status errors (see process_group.h).
#include "core/comm/process_group.h"

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
#include "core/comm/shm_collectives.h"
#include "core/env/run_dir.h"
#include "core/env/settings.h"
#include "core/trace/flight_recorder.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// Each process group this process joins gets its own key prefix in the store;
// every rank joins groups in the same order, so the n-th group agrees across
// ranks.
std::atomic<int> g_group_generation{0};

at::ScalarType ToScalarType(DType dtype) {
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

c10d::ReduceOp ToC10dOp(ReduceOp op) {
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

void DivideForMean(at::Tensor& tensor, int world_size) {
  if (at::isIntegralType(tensor.scalar_type(), /*includeBool=*/false)) {
    tensor.div_(world_size, "trunc");
  } else {
    tensor.div_(world_size);
  }
}

at::Tensor WrapBuffer(const void* data, size_t count, DType dtype) {
  return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(count)},
                       at::TensorOptions().dtype(ToScalarType(dtype)));
}

// Broadcasts up to this size go through shared memory: small ones (BatchNorm
// buffers every step, objects) are latency-bound, and Gloo's wake-ups cost
// milliseconds on busy cores. Larger ones (the initial parameters) cost about
// the same either way, mostly in first touches of new pages, and through
// shared memory they would add the slot's pages to every rank's memory.
constexpr size_t kShmBroadcastMaxBytes = 1 << 20;

// How long a new group's ranks wait for each peer's token (at most the group's timeout). A peer
// sends its tokens as soon as its own connections are up, so only a connection that a stranger
// holds keeps one away this long.
constexpr absl::Duration kConnectionCheckDeadline = absl::Seconds(60);

// Python's names of the dtypes, for the messages.
absl::string_view DTypeName(at::ScalarType type) {
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
CallSignature Signature(absl::string_view kind, const at::Tensor& tensor,
                        std::optional<ReduceOp> op = std::nullopt, int root = -1) {
  CallSignature call;
  call.kind = kind;
  if (tensor.defined()) {
    call.dtype = DTypeName(tensor.scalar_type());
    call.count = static_cast<uint64_t>(tensor.numel());
  }
  if (op.has_value()) call.op = ReduceOpName(*op);
  call.root = root;
  return call;
}

// This host's name and the GPU's UUID: two ranks with the same one would share
// a GPU, which NCCL refuses (and may hang on rather than say so).
std::string GpuIdentity(const CudaSupport& cuda, int device_index) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return absl::StrCat(host, "/", cuda.DeviceUuid(device_index));
}

// OK when every rank of the group has a GPU of its own; else an error that
// names the ranks that share one.
absl::Status CheckOneGpuPerRank(const CudaSupport& cuda, c10d::Store& store,
                                const ClusterInfo& cluster, int device_index) {
  const std::string mine = GpuIdentity(cuda, device_index);
  store.set(absl::StrCat("gpu/", cluster.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  for (int r = 0; r < cluster.world_size; ++r) {
    if (r == cluster.rank) continue;
    const std::vector<uint8_t> theirs = store.get(absl::StrCat("gpu/", r));
    if (std::string(theirs.begin(), theirs.end()) == mine) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks ", std::min(r, cluster.rank), " and ", std::max(r, cluster.rank),
          " would share one GPU (cuda:", device_index, " on rank ", cluster.rank,
          "), which NCCL does not allow; give each rank its own GPU, or use the gloo backend"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Backend> group;  // Gloo or NCCL
  // Time this rank spent inside collectives (blocking ones, and waits for
  // those in flight): ProcessGroup::blocked_seconds().
  std::atomic<int64_t> blocked_ns{0};
  // Ranks of a ddpspawn launcher share a host: float sums and small
  // broadcasts go through shared memory.
  std::unique_ptr<SharedMemoryCollectives> shm;
  // A launcher's job of several nodes: float sums through shared memory in
  // each node and Gloo between the nodes.
  std::shared_ptr<HierarchicalAllReduce> hierarchical;
  // Every collective of this rank, numbered (see flight_recorder.h).
  std::unique_ptr<FlightRecorder> recorder;
  int generation = 0;  // of this group in this process

  // The shared memory that sums: this host's ranks', or this node's
  // (hierarchical); null: none.
  SharedMemoryCollectives* SumMemory() {
    if (shm) return shm.get();
    return hierarchical ? &hierarchical->node() : nullptr;
  }

  // True when `tensor`'s sum goes through SumMemory(): the same answer on
  // every rank for the same call.
  bool SumsInSharedMemory(const at::Tensor& tensor, ReduceOp op) {
    SharedMemoryCollectives* memory = SumMemory();
    return memory != nullptr && (op == ReduceOp::kSum || op == ReduceOp::kMean) &&
           tensor.device().is_cpu() && tensor.is_contiguous() &&
           (tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble) &&
           (tensor.nbytes() <= memory->capacity() ||
            memory->IsShared(tensor.data_ptr(), tensor.nbytes()));
  }

  // Sums (or averages) `tensor` through this host's shared memory when it
  // qualifies; false: use Gloo (or the hierarchical path).
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
  // Where tensors must live for this backend: CPU for gloo, this rank's GPU for
  // nccl.
  at::Device device = at::kCPU;

  // Runs a collective on `tensor` (moved to the backend's device and back if
  // needed).
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

namespace {

// Adds the time from its construction to its destruction to `*total_ns`
// (nothing when null).
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

}  // namespace

struct PendingWork::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor tensor;
  // The copy on the backend's device when `tensor` lives elsewhere (a CPU
  // buffer on NCCL, a CUDA tensor on Gloo); copied back at Wait().
  at::Tensor staged;
  int divide_by = 1;  // mean: sum, then divide
  bool done = false;  // completed at start (shared memory), not yet waited for
  // Hierarchical: the leader's sum between the nodes, which must reach the
  // node's ranks (at Wait(), else when this is destroyed).
  std::shared_ptr<HierarchicalAllReduce> hierarchical;
  std::optional<HierarchicalAllReduce::InFlight> in_flight;
  // Ends the call's flight record; returns the status to report.
  std::function<absl::Status(absl::Status)> finish;
  // The group's time blocked in collectives, to which Wait() adds its own.
  std::atomic<int64_t>* blocked_ns = nullptr;
};

PendingWork::PendingWork(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PendingWork::~PendingWork() {
  // A collective still in flight must finish before its tensor goes away; a
  // hierarchical one also ends on the node's other ranks, which wait for it.
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
    status = Guarded("all_reduce", [&] {
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

constexpr NamedValue<ReduceOp> kReduceOpNames[] = {
    {"sum", ReduceOp::kSum}, {"mean", ReduceOp::kMean},       {"min", ReduceOp::kMin},
    {"max", ReduceOp::kMax}, {"product", ReduceOp::kProduct}, {"avg", ReduceOp::kMean},
};

absl::string_view ReduceOpName(ReduceOp op) { return NameOf(kReduceOpNames, op); }

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  return ParseName(kReduceOpNames, "reduce op", name);
}

constexpr NamedValue<Backend> kBackendNames[] = {
    {"gloo", Backend::kGloo},
    {"nccl", Backend::kNccl},
};

absl::string_view BackendName(Backend backend) { return NameOf(kBackendNames, backend); }

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  return ParseName(kBackendNames, "backend", name);
}

size_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kInt32 ? 4 : 8; }

int CudaDeviceCount() {
  absl::StatusOr<const CudaSupport*> cuda = LoadCudaSupport();
  return cuda.ok() ? (*cuda)->DeviceCount() : 0;
}

bool NcclAvailable() { return CudaSupportBuilt(); }

ProcessGroup::ProcessGroup(ClusterInfo cluster, GroupOptions options, std::unique_ptr<Impl> impl)
    : cluster_(std::move(cluster)), options_(options), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

bool ProcessGroup::uses_shared_memory() const {
  return impl_->shm != nullptr || impl_->hierarchical != nullptr;
}

ArrivalReport ProcessGroup::arrivals() const {
  if (impl_->shm) return impl_->shm->arrivals();
  ArrivalReport report;
  report.ranks.resize(world_size());
  if (world_size() == 1) {
    report.unmeasured = "a group of one rank";
  } else if (backend() == Backend::kNccl) {
    report.unmeasured =
        "nccl's collectives run on the GPUs and do not say when each rank reached them";
  } else if (impl_->hierarchical) {
    report.unmeasured =
        "the ranks span several nodes, whose clocks differ (each node's ranks meet in its own "
        "shared memory)";
  } else {
    report.unmeasured =
        "gloo over TCP does not say when each rank reached a collective; arrivals are timed "
        "where one launcher's ranks meet in shared memory (DDPSPAWN_SHM_ALLREDUCE=1)";
  }
  return report;
}

namespace {

// NCCL needs a CUDA build with NCCL, and the rank's device on this machine.
absl::Status CheckNcclDevice(const ClusterInfo& cluster, int device_index) {
  if (!NcclAvailable()) {
    return absl::UnavailableError(
        "backend 'nccl' needs a CUDA build of LibTorch with NCCL, and this build of ddpspawn has "
        "none; use 'gloo', or rebuild with DDPSPAWN_LIBTORCH set to a CUDA LibTorch");
  }
  absl::StatusOr<const CudaSupport*> cuda = LoadCudaSupport();
  if (!cuda.ok()) {
    return absl::UnavailableError(
        absl::StrCat("backend 'nccl' on rank ", cluster.rank, ": ", cuda.status().message()));
  }
  const int present = (*cuda)->DeviceCount();
  if (present == 0) {
    return absl::UnavailableError(
        absl::StrCat("backend 'nccl' needs a CUDA device, and no CUDA device is present on this "
                     "machine (rank ",
                     cluster.rank, "); use 'gloo'"));
  }
  if (device_index >= present) {
    return absl::UnavailableError(absl::StrCat("rank ", cluster.rank, " needs cuda:", device_index,
                                               " for nccl, and this machine has ", present,
                                               " CUDA device", present == 1 ? "" : "s"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProcessGroup::Impl::JoinGloo(const c10::intrusive_ptr<c10d::PrefixStore>& store,
                                          const ClusterInfo& cluster, const GroupOptions& options,
                                          bool one_launcher, bool shm_enabled, bool debug) {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
  const std::shared_ptr<::gloo::transport::Device> gloo_device = GlooDevice(cluster);
  gloo_options->devices.push_back(gloo_device);
  group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, cluster.rank, cluster.world_size,
                                                      gloo_options);
  if (cluster.kind == ClusterKind::kDdpspawn && cluster.store_is_external) {
    absl::StatusOr<std::unique_ptr<HierarchicalAllReduce>> joined =
        HierarchicalAllReduce::Join(group, store, cluster, generation, gloo_device, options.timeout,
                                    shm_enabled, options.check_calls || debug);
    if (!joined.ok()) return joined.status();
    hierarchical = *std::move(joined);
  }
  if (one_launcher) {  // its store is private: the tokens prove who is at each end
    RETURN_IF_ERROR(CheckEveryConnection(*group, *store, cluster.rank, cluster.world_size,
                                         std::min(options.timeout, kConnectionCheckDeadline)));
  }
  if (one_launcher && cluster.world_size > 1 && shm_enabled) {
    absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> joined = JoinSharedMemory(
        *group, cluster, absl::StrCat(SharedMemoryPrefix(cluster.run_dir), generation),
        options.timeout);
    if (!joined.ok()) return joined.status();
    shm = *std::move(joined);
    if (shm) shm->set_compare_calls(options.check_calls || debug);
  }
  WaitUntilEveryRankJoined(*store, cluster);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(const ClusterInfo& cluster,
                                                                   const GroupOptions& options) {
  const int device_index = options.device_index >= 0 ? options.device_index : cluster.local_rank;
  if (options.backend == Backend::kNccl) RETURN_IF_ERROR(CheckNcclDevice(cluster, device_index));
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the process group timeout must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->timeout = absl::ToChronoMilliseconds(options.timeout);
  // DDPSPAWN_DEBUG=1 adds the cross-rank checks; DDPSPAWN_SHM_ALLREDUCE=0 sends everything
  // through Gloo. Other values are refused.
  ASSIGN_OR_RETURN(bool debug, ReadSwitch(Setting::kDebug, false));
  ASSIGN_OR_RETURN(bool shm_enabled, ReadSwitch(Setting::kShmAllReduce, true));
  GroupOptions effective = options;
  effective.debug_checks = effective.debug_checks || debug;
  const int generation = g_group_generation++;
  impl->generation = generation;
  // One launcher's ranks, all on this host: they share a run directory (and
  // flight records and shared memory through it).
  const bool one_launcher = cluster.kind == ClusterKind::kDdpspawn && !cluster.store_is_external &&
                            !cluster.run_dir.empty();
  ASSIGN_OR_RETURN(
      std::unique_ptr<FlightRecorder> recorder,
      FlightRecorder::Create(
          one_launcher ? RunDirCallsFile(cluster.run_dir, cluster.rank, generation) : ""));
  impl->recorder = std::move(recorder);
  // torchrun's store outlives its attempts: a restarted rank must not read the
  // previous attempt's addresses.
  std::string prefix = absl::StrCat("ddpspawn/attempt", cluster.attempt, "/group", generation);
  absl::Status refused = absl::OkStatus();
  absl::Status created = Guarded("joining the process group", [&] {
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        prefix, MakeStore(cluster, generation, impl->timeout));
    if (options.backend == Backend::kNccl) {
      const CudaSupport& cuda = **LoadCudaSupport();  // CheckNcclDevice loaded it
      impl->device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
      cuda.SetDevice(device_index);
      refused = CheckOneGpuPerRank(cuda, *store, cluster, device_index);
      if (!refused.ok()) return;
      impl->group = cuda.MakeNcclBackend(store, cluster.rank, cluster.world_size, impl->timeout);
      WaitUntilEveryRankJoined(*store, cluster);
      return;
    }
    refused = impl->JoinGloo(store, cluster, options, one_launcher, shm_enabled, debug);
  });
  if (!created.ok()) return created;
  if (!refused.ok()) return refused;
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(cluster, effective, std::move(impl)));
}

namespace {

// How long a rank whose peer closed the connection waits before returning
// the error (see FinishRecorded).
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
    // A consequence: the peer failed (or timed out, and Gloo closed the pair)
    // first. Its report, which says why, should reach the launcher before
    // this one, which the launcher would otherwise name as the first failure.
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
  // On NCCL the exchange would wait for the GPU; an all-reduce in flight is
  // DDP's, whose buckets the reducer agreed on when it was built.
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
  // First one tiny all-reduce: the largest and the smallest hash of the rows
  // (a deterministic one: std::hash of the bytes). Only when they differ are
  // the rows gathered, to name every rank's call.
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
  for (const at::Tensor& row : all) {
    CallFingerprint theirs;
    std::memcpy(&theirs, row.data_ptr(), sizeof theirs);
    const int64_t* v = row.data_ptr<int64_t>();
    std::string shape;
    for (int d = 0; d < std::min<int64_t>(v[kPrintWords], kMaxDims); ++d) {
      absl::StrAppend(&shape, d ? ", " : "", v[kPrintWords + 1 + d]);
    }
    calls.push_back(absl::StrCat(Describe(theirs.signature()),
                                 v[kPrintWords] > 0 ? absl::StrCat(" [", shape, "]") : ""));
  }
  return MismatchedCallsError(calls);
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
    // Gloo may use a non-root rank's tensor as scratch space: reduce a copy
    // there.
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
      // The same outcome on every rank: a sum is in place on all ranks or
      // staged on all.
      const size_t bytes = static_cast<size_t>(elements) * options.dtype().itemsize();
      absl::StatusOr<std::shared_ptr<void>> memory =
          impl_->shm ? impl_->shm->AllocateShared(bytes)
                     : impl_->hierarchical->AllocateShared(bytes);
      if (memory.ok()) {
        std::shared_ptr<void> keep = *std::move(memory);
        buffer = at::from_blob(
            keep.get(), {elements}, [keep](void*) mutable { keep.reset(); }, options);
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

absl::Status ProcessGroup::AllGather(const void* data, size_t count, DType dtype, void* out) {
  if (count == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, AllGather(WrapBuffer(data, count, dtype)));
  const size_t bytes = count * DTypeSize(dtype);
  for (size_t r = 0; r < gathered.size(); ++r) {
    std::memcpy(static_cast<char*>(out) + r * bytes, gathered[r].data_ptr(), bytes);
  }
  return absl::OkStatus();
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
