// The rendezvous of a job's launchers across nodes (static, torchrun's
// --nnodes/--node-rank/--master-addr/--master-port): node 0's launcher serves a c10d TCPStore at
// the master address, which outlives any rank; every launcher joins it, checks that it belongs to
// the same job, claims its node rank and waits for the other nodes. The ranks later form their
// process group on the same store. Failures are shared through it, so that each node can say which
// node failed first. A job whose ranks failed can start again on every node (max_restarts): each
// start is a generation, with keys of its own.
//
// Where the store listens: LibTorch 2.11's TCPStore (libuv) binds the port on every interface (IPv4
// and IPv6), whatever the master address says; anyone who reaches the port can read and write it.
// The job check keeps other ddpspawn jobs out by mistake, not a hostile peer: run multi-node jobs
// on a network you trust.
#ifndef DDPSPAWN_CORE_JOB_NODE_RENDEZVOUS_H_
#define DDPSPAWN_CORE_JOB_NODE_RENDEZVOUS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/env/cluster_environment.h"

namespace ddpspawn {

struct NodeRendezvousOptions {
  std::string master_addr;
  int master_port = 0;
  int nnodes = 2;
  int node_rank = 0;
  int nprocs_per_node = 1;  // ranks per node (messages name a node's ranks)
  // What every node of the job runs (command, model, shape); a launcher that finds another job's
  // description at the address is refused.
  std::string job;
  // How long to wait for the store and for every node to arrive.
  absl::Duration timeout = kDefaultTimeout;
};

struct NodeFailure {
  int node = 0;
  absl::Time at;
  std::string message;
};

// One launcher's place in the rendezvous. Not thread-safe: the launching thread uses it; it must
// outlive the ranks of this node (node 0's serves the store that every rank joins through). It owns
// its store connection (node 0's: the server) and a heartbeat thread with a connection of its own,
// which its destructor stops and joins.
class NodeRendezvous {
 public:
  // Serves the store (node 0) or connects to it, checks the job, claims the node rank and waits
  // until every node did. Errors: Unavailable (the store cannot be reached or served),
  // FailedPrecondition (another job, or a node rank already taken), DeadlineExceeded (nodes that
  // never arrived, named).
  static absl::StatusOr<std::unique_ptr<NodeRendezvous>> Join(const NodeRendezvousOptions& options);
  ~NodeRendezvous();

  // This node's ranks failed with `status`, the first at `failed_at`: records it for the other
  // nodes, waits up to `wait` for each other node to record how its ranks ended (unless its
  // launcher is gone: see Liveness in the .cc), and returns `status` told for the whole job: the
  // node that failed first, when another did, and each node that did not say how it ended, whose
  // text also goes to `unreported` (empty: every node reported, or the store is gone). Best effort,
  // as everything after Join(): a store that is gone (node 0's launcher ended) is ignored.
  absl::Status ShareFailure(const absl::Status& status, absl::Time failed_at, absl::Duration wait,
                            std::string* unreported);
  // ShareFailure()'s `wait` when this node's ranks never started: the other nodes' ranks would wait
  // to form their group until its timeout.
  static constexpr absl::Duration kNoRanksWait = absl::Seconds(1);
  // After this node's ranks ended well: node 0 hands `result` (rank 0's) to the other nodes and
  // keeps the store up to `wait` until each has read it (or is gone); the others wait up to `wait`
  // for it while node 0's launcher lives. Returns rank 0's result; Aborted when another node's
  // ranks failed after this node's ended (the rendezvous may then Restart()), Unavailable when node
  // 0's launcher is gone, DeadlineExceeded when `wait` passed.
  absl::StatusOr<std::string> Finish(absl::Duration wait, const std::string& result);

  // After a generation whose every node reported its failure: starts the next one on every node, or
  // on none. Node 0 names the checkpoint the next ranks continue from (its `resume_from`; empty:
  // the start); every node learns it, asks `refusal` whether it can start from it (empty: yes; else
  // why not), and waits up to the timeout for the others' answers, ending at the first refusal.
  // Returns node 0's `resume_from`. FailedPrecondition names a node that refused or declined (node
  // 0 gone or silent counts as refusing), DeadlineExceeded nodes that never answered (gone, or the
  // timeout passed), Unavailable a store that is gone (node 0's launcher ended).
  absl::StatusOr<std::string> Restart(
      const std::string& resume_from,
      const std::function<std::string(const std::string& resume_from)>& refusal);
  // This node does not start the next generation, because `why`: the others' Restart() fails at
  // once naming it. Best effort.
  void DeclineRestart(const std::string& why);
  // 0 for the ranks Join() started; one more after each Restart().
  int generation() const;

 private:
  struct Impl;
  explicit NodeRendezvous(std::unique_ptr<Impl> impl);
  // ShareFailure() in steps: record this node's failure; the earliest any node reported, once every
  // other node said how it ended, is gone, or `wait` passed; the other nodes that have not said it
  // (empty when the store is gone).
  void ReportFailure(absl::Time at, const std::string& message);
  std::optional<NodeFailure> FirstFailure(absl::Duration wait);
  std::vector<int> SilentNodes();

  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_JOB_NODE_RENDEZVOUS_H_
