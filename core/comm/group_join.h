// Joining a c10d process group, the steps ProcessGroup::Create takes: the store the ranks meet in
// (a launcher's file store, a TCPStore, or in memory for one rank), the network device Gloo binds
// to, the wait until every rank has its group, and the negotiation of the shared-memory collectives
// (of the job, or of each node). Internal to core/comm. Free functions; each call is independent of
// the others.
#ifndef DDPSPAWN_CORE_COMM_GROUP_JOIN_H_
#define DDPSPAWN_CORE_COMM_GROUP_JOIN_H_

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/comm/shm_collectives.h"
#include "core/env/cluster_environment.h"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace ddpspawn {

// GLOO_SOCKET_IFNAME's interface; else loopback for a launcher's or a single-host group; else the
// local address that routes to the master.
std::shared_ptr<::gloo::transport::Device> GlooDevice(const ClusterInfo& cluster);

// The store for this process's `generation`-th group. A launcher's groups each get their own file:
// FileStore removes its file when the last rank lets go of it, which must not take the keys of a
// group created after it.
c10::intrusive_ptr<c10d::Store> MakeStore(const ClusterInfo& cluster, int generation,
                                          std::chrono::milliseconds timeout);

// A rank whose side of Gloo's full mesh is connected may go on (and even exit) while a peer is
// still connecting to it, which fails that peer with "Connection closed by peer". Like
// torch.distributed's init_process_group, wait on the store until every rank has its group.
void WaitUntilEveryRankJoined(c10d::Store& store, const ClusterInfo& cluster);

// The shared-memory collectives, when every rank can set them up with the same slot size (/dev/shm
// may be small or full); null: every rank uses Gloo. A segment that a rank refuses (another user's)
// fails the group on every rank.
absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> JoinSharedMemory(
    c10d::Backend& group, const ClusterInfo& cluster, const std::string& name_prefix,
    absl::Duration timeout);

// The same for this node's ranks of a job of several nodes (one launcher per node): set up through
// the launcher's private store file of `generation`, and agreed over every rank of `job_group`: one
// slot size on every node, and null on every rank unless every node has them.
absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> JoinNodeSharedMemory(
    c10d::Backend& job_group, const ClusterInfo& cluster, int generation,
    const std::string& name_prefix, absl::Duration timeout);

// The least of every rank's `value`, through `group` (may throw, as c10d does).
int64_t MinOverRanks(c10d::Backend& group, int64_t value);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_GROUP_JOIN_H_
