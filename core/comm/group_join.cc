// Joining a process group (see group_join.h).
#include "core/comm/group_join.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/comm/prompt_file_store.h"
#include "core/env/run_dir.h"
#include "core/util/local_address.h"

namespace ddpspawn {
namespace {

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || absl::StartsWith(addr, "127.") || addr == "::1";
}

// Per rank: the largest float buffer that goes through shared memory (bigger ones use Gloo).
constexpr size_t kShmCapacityBytes = 64 << 20;

// Rank 0's `value` (at most 255 bytes) on every rank, through Gloo.
std::string BroadcastFromRank0(c10d::Backend& group, const std::string& value) {
  std::vector<at::Tensor> tensors{at::zeros({256}, at::kByte)};
  std::memcpy(tensors[0].data_ptr(), value.data(), std::min<size_t>(value.size(), 255));
  c10d::BroadcastOptions opts;
  opts.rootRank = 0;
  group.broadcast(tensors, opts)->wait();
  const char* text = static_cast<const char*>(tensors[0].data_ptr());
  return std::string(text, strnlen(text, 256));
}

// Creates the segments with `channel` among `rank` of `world_size` (all of the job's ranks, or one
// node's), agreed over every rank of `job_group`: the same staging capacity everywhere, a refusal
// anywhere an error everywhere, and null everywhere unless every rank has them.
absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> JoinAgreed(
    c10d::Backend& job_group, const ClusterInfo& cluster, int rank, int world_size,
    const SharedMemoryCollectives::SetupChannel& channel, const std::string& name_prefix,
    absl::Duration timeout) {
  const int64_t capacity =
      MinOverRanks(job_group, static_cast<int64_t>(SharedMemoryCollectives::AffordableCapacity(
                                  world_size, kShmCapacityBytes)));
  absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> shm = SharedMemoryCollectives::Create(
      name_prefix, rank, world_size, static_cast<size_t>(std::max<int64_t>(capacity, 0)), timeout,
      channel);
  // The least of: the job rank of a refusing rank, else world size when some rank has none, else
  // world size + 1.
  const bool refused = absl::IsPermissionDenied(shm.status());
  const int64_t outcome = MinOverRanks(
      job_group, refused ? cluster.rank : cluster.world_size + (shm.ok() && *shm ? 1 : 0));
  if (refused) return shm.status();
  if (outcome < cluster.world_size) {
    return absl::PermissionDeniedError(
        absl::StrCat("rank ", outcome, " refused the job's shared-memory segment (see its error)"));
  }
  if (outcome == cluster.world_size) return nullptr;
  return shm;
}

// The setup channel of one node's ranks: keys in the launcher's private store.
class NodeStoreChannel {
 public:
  NodeStoreChannel(c10d::Store& store, int rank, int world_size)
      : store_(store), rank_(rank), world_size_(world_size) {}

  std::string BroadcastFromRank0(const std::string& value) {
    const std::string key = absl::StrCat("shm/", round_++, "/value");
    if (rank_ == 0) store_.set(key, std::vector<uint8_t>(value.begin(), value.end()));
    const std::vector<uint8_t> got = store_.get(key);
    return std::string(got.begin(), got.end());
  }

  bool All(bool ok) {
    const std::string prefix = absl::StrCat("shm/", round_++, "/ok/");
    store_.set(absl::StrCat(prefix, rank_), std::vector<uint8_t>{ok ? uint8_t{1} : uint8_t{0}});
    bool all = true;
    for (int r = 0; r < world_size_; ++r) {
      const std::vector<uint8_t> theirs = store_.get(absl::StrCat(prefix, r));
      all = all && !theirs.empty() && theirs[0] == 1;
    }
    return all;
  }

 private:
  c10d::Store& store_;
  const int rank_, world_size_;
  int round_ = 0;
};

}  // namespace

int64_t MinOverRanks(c10d::Backend& group, int64_t value) {
  std::vector<at::Tensor> tensors{at::full({1}, value, at::kLong)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MIN;
  group.allreduce(tensors, opts)->wait();
  return tensors[0].item<int64_t>();
}

std::shared_ptr<::gloo::transport::Device> GlooDevice(const ClusterInfo& cluster) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // A launcher-started or single-node group stays on loopback: nothing off this host can reach it.
  if ((cluster.kind == ClusterKind::kDdpspawn && !cluster.store_is_external) ||
      IsLoopback(cluster.master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  // Else the address this host reaches the master from (not whatever its hostname resolves to,
  // which may be loopback or another network).
  absl::StatusOr<std::string> local = LocalAddressTowards(cluster.master_addr, cluster.master_port);
  if (local.ok()) return c10d::ProcessGroupGloo::createDeviceForHostname(*local);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<c10d::Store> MakeStore(const ClusterInfo& cluster, int generation,
                                          std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Store> store;
  if (cluster.kind == ClusterKind::kDdpspawn && !cluster.store_is_external) {
    store = c10::make_intrusive<PromptFileStore>(RunDirStoreFile(cluster.run_dir, generation),
                                                 cluster.world_size);
  } else if (cluster.world_size == 1) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(cluster.master_port);
    options.isServer = cluster.rank == 0 && !cluster.store_is_external;
    options.numWorkers = cluster.world_size;
    options.waitWorkers = false;
    options.timeout = timeout;
    store = c10::make_intrusive<c10d::TCPStore>(cluster.master_addr, options);
  }
  store->setTimeout(timeout);
  return store;
}

void WaitUntilEveryRankJoined(c10d::Store& store, const ClusterInfo& cluster) {
  store.set(absl::StrCat("joined/", cluster.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  keys.reserve(cluster.world_size);
  for (int r = 0; r < cluster.world_size; ++r) keys.push_back(absl::StrCat("joined/", r));
  store.wait(keys);
}

absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> JoinSharedMemory(
    c10d::Backend& group, const ClusterInfo& cluster, const std::string& name_prefix,
    absl::Duration timeout) {
  SharedMemoryCollectives::SetupChannel channel;
  channel.broadcast_from_rank0 = [&](const std::string& value) {
    return BroadcastFromRank0(group, value);
  };
  channel.all = [&](bool ok) { return MinOverRanks(group, ok ? 1 : 0) == 1; };
  return JoinAgreed(group, cluster, cluster.rank, cluster.world_size, channel, name_prefix,
                    timeout);
}

absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> JoinNodeSharedMemory(
    c10d::Backend& job_group, const ClusterInfo& cluster, int generation,
    const std::string& name_prefix, absl::Duration timeout) {
  PromptFileStore store(RunDirStoreFile(cluster.run_dir, generation), cluster.local_world_size);
  store.setTimeout(absl::ToChronoMilliseconds(timeout));
  NodeStoreChannel node(store, cluster.local_rank, cluster.local_world_size);
  SharedMemoryCollectives::SetupChannel channel;
  channel.broadcast_from_rank0 = [&](const std::string& value) {
    return node.BroadcastFromRank0(value);
  };
  channel.all = [&](bool ok) { return node.All(ok); };
  return JoinAgreed(job_group, cluster, cluster.local_rank, cluster.local_world_size, channel,
                    name_prefix, timeout);
}

}  // namespace ddpspawn
