// NodeJob (see node_job.h).
#include "core/job/node_job.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/job/node_rendezvous.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// Rank 0's result crosses the rendezvous tagged, so that "none" and empty bytes stay apart.
constexpr char kHasResult = 'r';

// Whether this node can continue from node 0's checkpoint (empty: yes).
std::string CannotRead(const std::string& path) {
  if (path.empty() || access(path.c_str(), R_OK) == 0) return "";
  return absl::StrCat("it cannot read ", path, " (", std::strerror(errno),
                      "), the checkpoint node 0 continues from: a restart of several nodes needs "
                      "default_root_dir on a filesystem every node shares");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeJob>> NodeJob::Create(NodeJobOptions options) {
  if (options.nnodes < 1 || options.node_rank < 0 || options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("node_rank ", options.node_rank,
                                                   " is outside [0, nnodes=", options.nnodes, ")"));
  }
  if (options.nnodes > 1 &&
      (options.master_addr.empty() || options.master_port <= 0 || options.master_port > 65535)) {
    return absl::InvalidArgumentError(
        "nnodes > 1 needs master_addr and master_port (1..65535): node 0's launcher's, the same "
        "on every node");
  }
  return std::unique_ptr<NodeJob>(new NodeJob(std::move(options)));
}

NodeJob::NodeJob(NodeJobOptions options) : options_(std::move(options)) {}

NodeJob::~NodeJob() = default;

int NodeJob::nprocs() const { return ranks_ == nullptr ? 0 : ranks_->nprocs(); }

const std::vector<RankOutcome>& NodeJob::outcomes() const {
  static const std::vector<RankOutcome>* const kNone = new std::vector<RankOutcome>();
  return ranks_ == nullptr ? *kNone : ranks_->outcomes();
}

int NodeJob::failed_rank() const { return ranks_ == nullptr ? -1 : ranks_->failed_rank(); }

absl::Status NodeJob::Prepare(LaunchSpec spec) {
  ranks_.reset();
  result_.reset();
  failure_shared_ = false;
  restart_refusal_.clear();
  nprocs_per_node_ = spec.nprocs;  // the job's shape, even when the spec is refused
  spec.nnodes = options_.nnodes;
  spec.node_rank = options_.node_rank;
  if (options_.nnodes > 1) {  // one node: the spec's own (default: loopback, a free port)
    spec.master_addr = options_.master_addr;
    spec.master_port = options_.master_port;
  }
  spec.env.push_back(absl::StrCat("TORCHELASTIC_RESTART_COUNT=", generation_));
  absl::StatusOr<std::unique_ptr<Job>> ranks = Job::Create(std::move(spec));
  prepared_ = ranks.status();
  if (ranks.ok()) ranks_ = *std::move(ranks);
  return prepared_;
}

absl::Status NodeJob::Start() {
  // Node 0's store must serve before any rank looks for it.
  if (options_.nnodes > 1 && rendezvous_ == nullptr) {
    NodeRendezvousOptions node;
    node.master_addr = options_.master_addr;
    node.master_port = options_.master_port;
    node.nnodes = options_.nnodes;
    node.node_rank = options_.node_rank;
    node.nprocs_per_node = nprocs_per_node_;
    node.job = absl::StrCat(options_.description, " nnodes=", options_.nnodes,
                            " nproc_per_node=", nprocs_per_node_);
    node.timeout = options_.rendezvous_timeout;
    ASSIGN_OR_RETURN(rendezvous_, NodeRendezvous::Join(node));
  }
  absl::Status started = ranks_ == nullptr ? prepared_ : ranks_->Start();
  if (!started.ok() && rendezvous_ != nullptr) return FinishNode(started, /*ranks_ran=*/false);
  return started;
}

absl::Status NodeJob::Wait() {
  if (ranks_ == nullptr) return prepared_;
  absl::Status waited = ranks_->Wait();
  if (rendezvous_ == nullptr) {
    result_ = ranks_->result();
    return waited;
  }
  if (failure_shared_) return waited;
  return FinishNode(waited, /*ranks_ran=*/true);
}

absl::Status NodeJob::Run() {
  RETURN_IF_ERROR(Start());
  return Wait();
}

absl::Status NodeJob::FinishNode(const absl::Status& waited, bool ranks_ran) {
  if (!waited.ok()) {
    // The rendezvous stays, for PrepareRestart(). The other nodes' ranks end soon after this
    // node's; when this node's never ran, theirs wait to form their group until its timeout.
    failure_shared_ = true;
    const absl::Time failed_at =
        ranks_ == nullptr ? absl::Now() : ranks_->failed_at().value_or(absl::Now());
    return rendezvous_->ShareFailure(
        waited, failed_at, ranks_ran ? options_.rendezvous_timeout : NodeRendezvous::kNoRanksWait,
        &restart_refusal_);
  }
  // Every node returns rank 0's result, which node 0 hands over; should node 0's ranks fail after
  // this node's ended, the nodes may restart together.
  const std::optional<std::string>& own = ranks_->result();
  ASSIGN_OR_RETURN(
      std::string handed,
      rendezvous_->Finish(
          options_.rendezvous_timeout,
          own.has_value() ? absl::StrCat(std::string(1, kHasResult), *own) : std::string()));
  if (!handed.empty()) result_ = handed.substr(1);
  rendezvous_.reset();  // the job is done: a later Prepare() is a new one's
  return absl::OkStatus();
}

absl::StatusOr<std::string> NodeJob::PrepareRestart(const std::string& resume_from) {
  if (options_.nnodes == 1) {
    ++generation_;
    return resume_from;
  }
  absl::StatusOr<std::string> agreed =
      rendezvous_ == nullptr || !restart_refusal_.empty()
          ? absl::FailedPreconditionError(restart_refusal_.empty()
                                              ? "the last launch did not fail as a job of "
                                                "several nodes that can restart"
                                              : restart_refusal_)
          : rendezvous_->Restart(resume_from, CannotRead);
  if (!agreed.ok()) {
    // The others, if waiting for this node's answer, stop at once.
    if (rendezvous_ != nullptr && !restart_refusal_.empty()) {
      rendezvous_->DeclineRestart(restart_refusal_);
    }
    rendezvous_.reset();
    return agreed.status();
  }
  ++generation_;
  return agreed;
}

void NodeJob::DeclineRestart(const std::string& why) {
  if (rendezvous_ != nullptr) rendezvous_->DeclineRestart(why);
  rendezvous_.reset();
}

}  // namespace ddpspawn
