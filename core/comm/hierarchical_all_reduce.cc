// Shared memory within each node, Gloo between the nodes' leaders (see hierarchical_all_reduce.h).
#include "core/comm/hierarchical_all_reduce.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/group_join.h"
#include "core/comm/guarded.h"
#include "core/env/run_dir.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

bool HierarchicalAllReduce::Fits(const ClusterInfo& cluster) {
  return cluster.kind == ClusterKind::kDdpspawn && cluster.store_is_external &&
         !cluster.run_dir.empty() && cluster.local_world_size > 1 &&
         cluster.world_size > cluster.local_world_size &&
         cluster.world_size % cluster.local_world_size == 0 &&
         cluster.rank == cluster.node_rank * cluster.local_world_size + cluster.local_rank;
}

absl::StatusOr<std::unique_ptr<HierarchicalAllReduce>> HierarchicalAllReduce::Join(
    c10::intrusive_ptr<c10d::Backend> job_group, const c10::intrusive_ptr<c10d::Store>& job_store,
    const ClusterInfo& cluster, int generation,
    const std::shared_ptr<::gloo::transport::Device>& device, absl::Duration timeout, bool wanted,
    bool compare_calls) {
  // Only when every rank fits and wants it (each node's launcher has its own environment,
  // DDPSPAWN_SHM_ALLREDUCE included).
  if (MinOverRanks(*job_group, wanted && Fits(cluster) ? 1 : 0) == 0) return nullptr;
  ASSIGN_OR_RETURN(
      std::unique_ptr<SharedMemoryCollectives> node,
      JoinNodeSharedMemory(*job_group, cluster, generation,
                           absl::StrCat(SharedMemoryPrefix(cluster.run_dir), generation), timeout));
  if (node == nullptr) return nullptr;
  node->set_compare_calls(compare_calls);
  const std::chrono::milliseconds chrono_timeout = absl::ToChronoMilliseconds(timeout);
  c10::intrusive_ptr<c10d::Backend> leaders;
  if (cluster.local_rank == 0) {
    auto options = c10d::ProcessGroupGloo::Options::create(chrono_timeout);
    options->devices.push_back(device);
    leaders = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("leaders", job_store), cluster.node_rank,
        cluster.world_size / cluster.local_world_size, options);
  }
  return std::unique_ptr<HierarchicalAllReduce>(new HierarchicalAllReduce(
      std::move(job_group), std::move(node), std::move(leaders), cluster, chrono_timeout));
}

HierarchicalAllReduce::HierarchicalAllReduce(c10::intrusive_ptr<c10d::Backend> job_group,
                                             std::unique_ptr<SharedMemoryCollectives> node,
                                             c10::intrusive_ptr<c10d::Backend> leaders,
                                             const ClusterInfo& cluster,
                                             std::chrono::milliseconds timeout)
    : job_group_(std::move(job_group)),
      node_(std::move(node)),
      leaders_(std::move(leaders)),
      job_rank_(cluster.rank),
      job_world_size_(cluster.world_size),
      local_rank_(cluster.local_rank),
      timeout_(timeout) {}

absl::StatusOr<HierarchicalAllReduce::InFlight> HierarchicalAllReduce::Start(
    at::Tensor& tensor, int divide_by, const CallSignature& call) {
  RETURN_IF_ERROR(tensor.scalar_type() == at::kFloat
                      ? node_->SumFloat(tensor.data_ptr<float>(), tensor.numel(), 1, call)
                      : node_->SumDouble(tensor.data_ptr<double>(), tensor.numel(), 1, call));
  InFlight sum;
  sum.tensor = tensor;
  sum.divide_by = divide_by;
  sum.call = call;
  if (leaders_) {
    sum.started = Guarded("all_reduce between the nodes", [&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::AllreduceOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      options.timeout = timeout_;
      sum.leaders_sum = leaders_->allreduce(tensors, options);
    });
  }
  return sum;
}

absl::Status HierarchicalAllReduce::Finish(InFlight& sum) {
  absl::Status leader = sum.started;
  if (sum.leaders_sum && leader.ok()) {
    leader = Guarded("all_reduce between the nodes", [&] {
      sum.leaders_sum->wait();
      if (sum.divide_by > 1) sum.tensor.div_(sum.divide_by);
    });
  }
  sum.leaders_sum.reset();
  // First the leader's outcome (its status code), then its result: each a call of its own (root 0),
  // so that neither passes for the node's sum.
  CallSignature outcome_call = sum.call;
  outcome_call.dtype = "status";
  outcome_call.count = 1;
  outcome_call.root = 0;
  int64_t code = static_cast<int64_t>(leader.code());
  RETURN_IF_ERROR(node_->Broadcast(&code, sizeof code, /*src=*/0, outcome_call));
  if (code != 0) {
    if (leaders_) return leader;
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat("the all_reduce between the nodes failed on this node's rank ",
                                     job_rank_ - local_rank_, " (see its error)"));
  }
  CallSignature result_call = sum.call;
  result_call.root = 0;
  return node_->BroadcastInPlace(sum.tensor.data_ptr(), sum.tensor.nbytes(), /*src=*/0,
                                 result_call);
}

absl::StatusOr<std::shared_ptr<void>> HierarchicalAllReduce::AllocateShared(size_t bytes) {
  absl::StatusOr<std::shared_ptr<void>> memory = node_->AllocateShared(bytes);
  const bool full =
      absl::IsResourceExhausted(memory.status()) || absl::IsUnavailable(memory.status());
  // The least of: the rank of a rank that failed, else the world size when some node's /dev/shm is
  // too small, else twice the world size.
  const int64_t outcome = MinOverRanks(*job_group_, memory.ok() ? 2 * job_world_size_
                                                    : full      ? job_world_size_
                                                                : job_rank_);
  if (!memory.ok() && !full) return memory.status();
  if (outcome < job_world_size_) {
    return absl::InternalError(
        absl::StrCat("rank ", outcome, " could not allocate a reduction buffer (see its error)"));
  }
  if (outcome == job_world_size_) {
    return absl::ResourceExhaustedError("a node's /dev/shm cannot hold the reduction buffer");
  }
  return memory;
}

}  // namespace ddpspawn
