// Float sums for a job of several nodes, each running several ranks of one ddpspawn launcher: the
// node's ranks sum through shared memory, one rank per node (its local rank 0, the node's leader)
// sums the nodes' partial sums with the other leaders through Gloo, and each leader hands the total
// to its node's ranks through shared memory. Each node then sends its buffer across the network
// once, where Gloo among all ranks sends it once per rank.
//
// The leaders' Gloo sum runs in the background between Start() and Finish(), so DDP's buckets still
// overlap with backward across nodes. Every rank gets its leader's bits, and the leaders' Gloo sums
// agree bit for bit, so every rank of the job ends with the same result.
//
// Internal to core/comm (ProcessGroup uses it). Thread-compatible: one thread calls at a time, and
// every rank makes the same calls in the same order; shared by the process group and the
// all-reduces it has in flight. Ownership: it owns this node's shared-memory collectives and, on a
// leader, the leaders' Gloo group; it shares the job's group with the process group.
#ifndef DDPSPAWN_CORE_COMM_HIERARCHICAL_ALL_REDUCE_H_
#define DDPSPAWN_CORE_COMM_HIERARCHICAL_ALL_REDUCE_H_

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/comm/shm_collectives.h"
#include "core/env/cluster_environment.h"
#include "core/trace/call_signature.h"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace ddpspawn {

class HierarchicalAllReduce {
 public:
  // True for a rank of a ddpspawn launcher's job of several nodes with more than one rank per node:
  // the jobs this class serves.
  static bool Fits(const ClusterInfo& cluster);

  // Every rank of a launcher's job of several nodes calls this once it has joined `job_group`,
  // whose store is `job_store`; `generation` numbers the group in this process. Null on every rank
  // when some rank does not fit or want it, or some node cannot set up shared memory (every rank
  // then uses Gloo alone); an error on one rank is an error on every rank.
  static absl::StatusOr<std::unique_ptr<HierarchicalAllReduce>> Join(
      c10::intrusive_ptr<c10d::Backend> job_group, const c10::intrusive_ptr<c10d::Store>& job_store,
      const ClusterInfo& cluster, int generation,
      const std::shared_ptr<::gloo::transport::Device>& device, absl::Duration timeout, bool wanted,
      bool compare_calls);

  // This node's shared-memory collectives. Their capacity() is the same on every node, so a tensor
  // that fits it, or lies in AllocateShared() memory, goes this way on every rank.
  SharedMemoryCollectives& node() { return *node_; }

  // An all-reduce between Start() and Finish().
  struct InFlight {
    at::Tensor tensor;
    int divide_by = 1;  // a mean: the world size
    CallSignature call;
    c10::intrusive_ptr<c10d::Work> leaders_sum;  // on a leader; else null
    absl::Status started;                        // on a leader: why the leaders' sum did not start
  };
  // The node's sum into `tensor` now (an error here is an error on every rank of the node); on a
  // leader, starts the leaders' sum in the background. `call` must outlive Finish() (its text is
  // static).
  absl::StatusOr<InFlight> Start(at::Tensor& tensor, int divide_by, const CallSignature& call);
  // Every rank of the node calls this once for each successful Start(), in the same order, also
  // when it no longer wants the result: the leader waits for its sum and divides for a mean, then
  // every rank of the node gets the leader's result, or the leader's failure as its own error.
  absl::Status Finish(InFlight& sum);

  // Zeroed memory for repeated sums (DDP's buckets), as SharedMemoryCollectives::AllocateShared(),
  // agreed over the job: in shared memory on every rank, or ResourceExhausted on every rank when
  // some node cannot hold it. A collective of every rank; may throw (c10d).
  absl::StatusOr<std::shared_ptr<void>> AllocateShared(size_t bytes);

 private:
  HierarchicalAllReduce(c10::intrusive_ptr<c10d::Backend> job_group,
                        std::unique_ptr<SharedMemoryCollectives> node,
                        c10::intrusive_ptr<c10d::Backend> leaders, const ClusterInfo& cluster,
                        std::chrono::milliseconds timeout);

  const c10::intrusive_ptr<c10d::Backend> job_group_;    // every rank: agreements
  const std::unique_ptr<SharedMemoryCollectives> node_;  // this node's ranks
  const c10::intrusive_ptr<c10d::Backend> leaders_;      // a leader's only; else null
  const int job_rank_, job_world_size_, local_rank_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_HIERARCHICAL_ALL_REDUCE_H_
