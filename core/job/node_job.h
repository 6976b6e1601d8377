// NodeJob: one node's part of a job, across its starts. It owns this node's ranks (a launch Job per
// start) and, when the job spans several nodes, this launcher's place in node 0's rendezvous
// (node_rendezvous.h): the failure of any node told for the whole job, rank 0's result handed from
// node 0 to every node, and restarts (max_restarts) that every node takes or none.
// DDPSpawnStrategy::Launch and the C ABI's ddpspawn_job both launch through it, as Lightning's
// strategy has a launcher and TorchElastic keeps the rendezvous apart from the workers.
//
// Each start is a generation: its ranks see the count in TORCHELASTIC_RESTART_COUNT, as torchrun's
// do, and form their group on keys of their own.
//
// Thread-safety: not thread-safe; the launching thread uses it. Ownership: it owns the ranks' Job
// (whose destructor kills and reaps what still runs) and the rendezvous, which must outlive this
// node's ranks (node 0's serves the store every rank joins through).
#ifndef DDPSPAWN_CORE_JOB_NODE_JOB_H_
#define DDPSPAWN_CORE_JOB_NODE_JOB_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/env/cluster_environment.h"
#include "core/launch/launcher.h"

namespace ddpspawn {

class NodeRendezvous;

struct NodeJobOptions {
  // torchrun's --nnodes, --node-rank, --master-addr, --master-port. With one node there is no
  // rendezvous and the master address is not used.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  // What every node runs (e.g. the command and the model): the rendezvous refuses a node whose
  // description differs. The shape (nnodes, ranks per node) is added to it.
  std::string description;
  // How long the rendezvous waits for every node (to arrive, to report a failure, to read rank 0's
  // result, to answer a restart).
  absl::Duration rendezvous_timeout = kDefaultTimeout;
};

class NodeJob {
 public:
  // Checks the node's place: node_rank in [0, nnodes), and with several nodes a master address and
  // a port in 1..65535. InvalidArgument names what is wrong. Nothing is joined or started yet.
  static absl::StatusOr<std::unique_ptr<NodeJob>> Create(NodeJobOptions options);
  NodeJob(const NodeJob&) = delete;
  NodeJob& operator=(const NodeJob&) = delete;
  ~NodeJob();

  // This start's ranks: `spec` with this node's place (nnodes, node_rank, the master address with
  // several nodes) and the generation in its environment. Validates it (Job::Create); nothing
  // starts. A failure here is also Start()'s, which tells it to the other nodes.
  absl::Status Prepare(LaunchSpec spec);
  // Joins node 0's rendezvous (first start of a job of several nodes), then starts the ranks. A
  // start that fails is told to the other nodes, whose ranks would otherwise wait for this node's.
  absl::Status Start();
  // Waits for the ranks (Job::Wait's errors). With several nodes: a failure is told for the whole
  // job (the node that failed first, when another did; the nodes that never said how they ended),
  // and after success rank 0's result comes from node 0 (Aborted when another node's ranks failed
  // after this node's ended).
  absl::Status Wait();
  absl::Status Run();

  // Rank 0's result after Wait(), if it set one (empty bytes are a result): with several nodes, as
  // node 0 handed it over once every node's ranks ended well.
  const std::optional<std::string>& result() const { return result_; }
  // This node's ranks (0 before a Prepare() that worked).
  int nprocs() const;
  // This start's ranks, as Job's (empty before a Prepare() that worked).
  const std::vector<RankOutcome>& outcomes() const;
  // The index in outcomes() of the rank whose failure ended the start; -1: none.
  int failed_rank() const;
  // The start the next Prepare() makes: 0, then one more after each PrepareRestart().
  int generation() const { return generation_; }

  // After a failed Wait(), to run the ranks again: the next Prepare() is the next generation.
  // Returns the checkpoint its ranks continue from: `resume_from` on one node; with several nodes
  // node 0's, once every node agreed to restart and can read it (see NodeRendezvous::Restart).
  // FailedPrecondition when the job cannot restart (a node never reported, refused or declined; or
  // the last start did not fail as a job of several nodes), else the rendezvous' error; the
  // rendezvous is then left.
  absl::StatusOr<std::string> PrepareRestart(const std::string& resume_from);
  // After a failed Wait() that this launcher does not restart, because `why`: the other nodes'
  // PrepareRestart() fails at once naming it.
  void DeclineRestart(const std::string& why);

 private:
  explicit NodeJob(NodeJobOptions options);
  // After this node's ranks ended (or never started): Wait()'s multi-node part.
  absl::Status FinishNode(const absl::Status& waited, bool ranks_ran);

  NodeJobOptions options_;
  int generation_ = 0;
  int nprocs_per_node_ = 0;  // the last Prepare()'s spec's, for the rendezvous
  absl::Status prepared_ = absl::FailedPreconditionError("NodeJob::Prepare() was not called");
  std::unique_ptr<Job> ranks_;
  std::unique_ptr<NodeRendezvous> rendezvous_;  // several nodes: from the first Start()
  bool failure_shared_ = false;                 // this start's failure went to the other nodes
  // Why the job cannot restart (the nodes that never reported), from the last failure.
  std::string restart_refusal_;
  std::optional<std::string> result_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_JOB_NODE_JOB_H_
