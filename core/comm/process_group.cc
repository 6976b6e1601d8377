// c10d process groups with Status errors (see process_group.h): joining one, its names and what it
// reports; its collectives are in process_group_collectives.cc.
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
#include "core/comm/process_group_impl.h"
#include "core/comm/shm_collectives.h"
#include "core/env/run_dir.h"
#include "core/env/settings.h"
#include "core/trace/flight_recorder.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {
// Each process group this process joins gets its own key prefix in the store; every rank joins
// groups in the same order, so the n-th group agrees across ranks.
std::atomic<int> g_group_generation{0};

// How long a new group's ranks wait for each peer's token (at most the group's timeout). A peer
// sends its tokens as soon as its own connections are up, so only a connection that a stranger
// holds keeps one away this long.
constexpr absl::Duration kConnectionCheckDeadline = absl::Seconds(60);

// This host's name and the GPU's UUID: two ranks with the same one would share a GPU, which NCCL
// refuses (and may hang on rather than say so).
std::string GpuIdentity(const CudaSupport& cuda, int device_index) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return absl::StrCat(host, "/", cuda.DeviceUuid(device_index));
}

// OK when every rank of the group has a GPU of its own; else an error that names the ranks that
// share one.
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
  // DDPSPAWN_DEBUG=1 adds the cross-rank checks; DDPSPAWN_SHM_ALLREDUCE=0 sends everything through
  // Gloo. Other values are refused.
  ASSIGN_OR_RETURN(bool debug, ReadSwitch(Setting::kDebug, false));
  ASSIGN_OR_RETURN(bool shm_enabled, ReadSwitch(Setting::kShmAllReduce, true));
  GroupOptions effective = options;
  effective.debug_checks = effective.debug_checks || debug;
  int generation = options.generation;
  if (generation < 0) {
    generation = g_group_generation++;
  } else {  // later groups count on above it
    int next = g_group_generation.load();
    while (next <= generation && !g_group_generation.compare_exchange_weak(next, generation + 1)) {
    }
  }
  impl->generation = generation;
  // One launcher's ranks, all on this host: they share a run directory (and flight records and
  // shared memory through it).
  const bool one_launcher = cluster.kind == ClusterKind::kDdpspawn && !cluster.store_is_external &&
                            !cluster.run_dir.empty();
  ASSIGN_OR_RETURN(
      std::unique_ptr<FlightRecorder> recorder,
      FlightRecorder::Create(
          one_launcher ? RunDirCallsFile(cluster.run_dir, cluster.rank, generation) : ""));
  impl->recorder = std::move(recorder);
  // torchrun's store outlives its attempts: a restarted rank must not read the previous attempt's
  // addresses.
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

}  // namespace ddpspawn
