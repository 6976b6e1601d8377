// Cluster environments: where a worker learns its rank, the world size and the rendezvous address.
// Detected as Lightning does: a ddpspawn launcher, TorchElastic (torchrun), SLURM, or plain
// environment variables (a single process when none is set).
#ifndef DDPSPAWN_CORE_ENV_CLUSTER_ENVIRONMENT_H_
#define DDPSPAWN_CORE_ENV_CLUSTER_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/env/settings.h"  // kRunDirEnv

namespace ddpspawn {

// How long a rank waits for the others (joining, each collective) unless told otherwise:
// torch.distributed's default.
inline constexpr absl::Duration kDefaultTimeout = absl::Minutes(30);

enum class ClusterKind { kDdpspawn, kTorchElastic, kSlurm, kEnv };

// "ddpspawn", "torchelastic", "slurm" or "env".
absl::string_view ClusterKindName(ClusterKind kind);

struct ClusterInfo {
  ClusterKind kind = ClusterKind::kEnv;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The launcher's private directory (FileStore, result and error files); set only for
  // ClusterKind::kDdpspawn.
  std::string run_dir;
  // The store at master_addr:master_port is served by someone else (torchrun's agent, a ddpspawn
  // launcher of a multi-node job), so rank 0 connects to it instead of serving it.
  bool store_is_external = false;
  // Which start of the job this is (torchrun's TORCHELASTIC_RESTART_COUNT, which a ddpspawn
  // launcher sets too): each attempt rendezvouses under keys of its own, because torchrun's store,
  // and a multi-node launcher's, outlives its attempts.
  int attempt = 0;
};

// True when someone else started this process as one of the job's ranks (torchrun, srun with more
// than one task, or WORLD_SIZE > 1 set by hand): it must join that job, not launch ranks of its
// own.
bool CreatesProcessesExternally(const ClusterInfo& info);

// Looks up one environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// Reads the real process environment.
std::optional<std::string> ProcessEnv(const char* name);

// Detects the environment and validates it (integers parse, 0 <= rank < world size, ...).
absl::StatusOr<ClusterInfo> DetectClusterEnvironment(const EnvLookup& env = ProcessEnv);

// The SLURM job this process runs in (SLURM_JOB_ID is set), whatever started it: its id and how
// many times SLURM requeued it (SLURM_RESTART_COUNT).
struct SlurmJob {
  std::string job_id;
  int restart_count = 0;
};
std::optional<SlurmJob> DetectSlurmJob(const EnvLookup& env = ProcessEnv);

// The first host of a SLURM node list: "node[003-005,9],gpu1" -> "node003".
absl::StatusOr<std::string> FirstHostInSlurmNodeList(absl::string_view list);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_ENV_CLUSTER_ENVIRONMENT_H_
