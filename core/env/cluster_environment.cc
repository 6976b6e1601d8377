// Detection and parsing of cluster environments (see cluster_environment.h).
#include "core/env/cluster_environment.h"

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// An integer variable, or `fallback` when unset; an error names the variable.
absl::StatusOr<int> IntVar(const EnvLookup& env, const char* name, std::optional<int> fallback) {
  std::optional<std::string> text = env(name);
  if (!text.has_value()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, " is not set"));
  }
  int value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", *text, "' is not an integer"));
  }
  return value;
}

std::string StrVar(const EnvLookup& env, const char* name, absl::string_view fallback) {
  std::optional<std::string> text = env(name);
  return text.has_value() && !text->empty() ? *text : std::string(fallback);
}

absl::Status Validate(const ClusterInfo& info) {
  if (info.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size must be >= 1, got ", info.world_size));
  }
  if (info.rank < 0 || info.rank >= info.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", info.rank, " is outside [0, ", info.world_size, ")"));
  }
  if (info.local_world_size < 1 || info.local_rank < 0 ||
      info.local_rank >= info.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", info.local_rank,
                                                   " is outside [0, ", info.local_world_size, ")"));
  }
  if (info.node_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("node rank must be >= 0, got ", info.node_rank));
  }
  if (info.attempt < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("restart count must be >= 0, got ", info.attempt));
  }
  if (info.master_port < 0 || info.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("master port ", info.master_port, " is not a TCP port"));
  }
  return absl::OkStatus();
}

// torchrun-style variables: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
// LOCAL_WORLD_SIZE and the node rank under `node_rank_var`.
absl::StatusOr<ClusterInfo> FromTorchrunVariables(const EnvLookup& env, ClusterKind kind,
                                                  const char* node_rank_var, bool all_required) {
  auto fallback = [&](int v) -> std::optional<int> {
    return all_required ? std::nullopt : std::optional<int>(v);
  };
  ClusterInfo info;
  info.kind = kind;
  ASSIGN_OR_RETURN(int world, IntVar(env, "WORLD_SIZE", fallback(1)));
  ASSIGN_OR_RETURN(int rank, IntVar(env, "RANK", fallback(0)));
  ASSIGN_OR_RETURN(int local_rank, IntVar(env, "LOCAL_RANK", fallback(0)));
  ASSIGN_OR_RETURN(int local_world, IntVar(env, "LOCAL_WORLD_SIZE", fallback(world)));
  ASSIGN_OR_RETURN(int node_rank, IntVar(env, node_rank_var, 0));
  ASSIGN_OR_RETURN(int port, IntVar(env, "MASTER_PORT", fallback(info.master_port)));
  info.world_size = world;
  info.rank = rank;
  info.local_rank = local_rank;
  info.local_world_size = local_world;
  info.node_rank = node_rank;
  info.master_port = port;
  info.master_addr = StrVar(env, "MASTER_ADDR", info.master_addr);
  return info;
}

absl::StatusOr<ClusterInfo> FromSlurm(const EnvLookup& env) {
  ClusterInfo info;
  info.kind = ClusterKind::kSlurm;
  ASSIGN_OR_RETURN(int world, IntVar(env, "SLURM_NTASKS", std::nullopt));
  ASSIGN_OR_RETURN(int rank, IntVar(env, "SLURM_PROCID", std::nullopt));
  ASSIGN_OR_RETURN(int local_rank, IntVar(env, "SLURM_LOCALID", 0));
  ASSIGN_OR_RETURN(int node_rank, IntVar(env, "SLURM_NODEID", 0));
  info.world_size = world;
  info.rank = rank;
  info.local_rank = local_rank;
  info.node_rank = node_rank;
  // SLURM_TASKS_PER_NODE looks like "2(x3),1": this node's count is not named, so use the first
  // group's count, which is exact on homogeneous allocations.
  info.local_world_size = std::max(info.local_rank + 1, 1);
  std::string per_node = StrVar(env, "SLURM_NTASKS_PER_NODE", "");
  if (per_node.empty()) per_node = StrVar(env, "SLURM_TASKS_PER_NODE", "");
  if (!per_node.empty()) {
    std::string first = per_node.substr(0, per_node.find_first_of("(,"));
    int count = 0;
    if (absl::SimpleAtoi(first, &count) && count > info.local_rank) {
      info.local_world_size = count;
    }
  }
  std::string nodes = StrVar(env, "SLURM_NODELIST", "");
  if (nodes.empty()) nodes = StrVar(env, "SLURM_JOB_NODELIST", "");
  if (std::optional<std::string> addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    info.master_addr = *addr;
  } else if (!nodes.empty()) {
    ASSIGN_OR_RETURN(std::string host, FirstHostInSlurmNodeList(nodes));
    info.master_addr = host;
  }
  // Lightning's rule: 15000 + the last four digits of the job id, unless MASTER_PORT is set.
  if (env("MASTER_PORT").has_value()) {
    ASSIGN_OR_RETURN(int port, IntVar(env, "MASTER_PORT", std::nullopt));
    info.master_port = port;
  } else {
    std::string job_id = StrVar(env, "SLURM_JOB_ID", "");
    int last_four = 0;
    if (job_id.size() > 4) job_id = job_id.substr(job_id.size() - 4);
    info.master_port = absl::SimpleAtoi(job_id, &last_four) ? 15000 + last_four : 15000;
  }
  return info;
}

bool IsSlurmBatchJob(const EnvLookup& env) {
  if (!env("SLURM_NTASKS").has_value()) return false;
  // An interactive `srun --pty bash` allocation is not a training job.
  std::string job_name = StrVar(env, "SLURM_JOB_NAME", "");
  return job_name != "bash" && job_name != "interactive";
}

bool IsTorchElastic(const EnvLookup& env) {
  for (const char* name : {"RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    if (!env(name).has_value()) return false;
  }
  return true;
}

// Which start of the job this is, for a launcher's ranks (a ddpspawn launcher restarting its ranks
// sets it as torchrun does); an error replaces `info`.
void ReadAttempt(const EnvLookup& env, absl::StatusOr<ClusterInfo>& info) {
  absl::StatusOr<int> attempt = IntVar(env, "TORCHELASTIC_RESTART_COUNT", 0);
  if (attempt.ok()) {
    info->attempt = *attempt;
  } else {
    info = attempt.status();
  }
}

}  // namespace

constexpr NamedValue<ClusterKind> kClusterKindNames[] = {
    {"ddpspawn", ClusterKind::kDdpspawn},
    {"torchelastic", ClusterKind::kTorchElastic},
    {"slurm", ClusterKind::kSlurm},
    {"env", ClusterKind::kEnv},
};

absl::string_view ClusterKindName(ClusterKind kind) { return NameOf(kClusterKindNames, kind); }

bool CreatesProcessesExternally(const ClusterInfo& info) {
  switch (info.kind) {
    case ClusterKind::kTorchElastic:
      return true;
    case ClusterKind::kSlurm:
    case ClusterKind::kEnv:
      return info.world_size > 1;
    case ClusterKind::kDdpspawn:
      return false;
  }
  return false;
}

std::optional<std::string> ProcessEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::optional<SlurmJob> DetectSlurmJob(const EnvLookup& env) {
  std::optional<std::string> id = env("SLURM_JOB_ID");
  if (!id.has_value() || id->empty()) return std::nullopt;
  SlurmJob job;
  job.job_id = *id;
  int count = 0;
  if (std::optional<std::string> text = env("SLURM_RESTART_COUNT");
      text.has_value() && absl::SimpleAtoi(*text, &count) && count > 0) {
    job.restart_count = count;
  }
  return job;
}

absl::StatusOr<std::string> FirstHostInSlurmNodeList(absl::string_view list) {
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    if (list[end] == ']') --depth;
    if (list[end] == ',' && depth == 0) break;
  }
  absl::string_view first = list.substr(0, end);
  size_t open = first.find('[');
  if (open == absl::string_view::npos) {
    if (first.empty() || depth != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot parse SLURM node list '", list, "'"));
    }
    return std::string(first);
  }
  size_t close = first.find(']', open);
  if (close == absl::string_view::npos || close != first.size() - 1 || close == open + 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse SLURM node list '", list, "'"));
  }
  // "003-005,9" -> "003": the first number keeps its zero padding.
  absl::string_view range = first.substr(open + 1, close - open - 1);
  absl::string_view number = range.substr(0, range.find_first_of("-,"));
  for (char c : number) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(absl::StrCat("cannot parse SLURM node list '", list, "'"));
    }
  }
  return absl::StrCat(first.substr(0, open), number);
}

absl::StatusOr<ClusterInfo> DetectClusterEnvironment(const EnvLookup& env) {
  absl::StatusOr<ClusterInfo> info;
  if (std::optional<std::string> run_dir = env(kRunDirEnv); run_dir.has_value()) {
    info = FromTorchrunVariables(env, ClusterKind::kDdpspawn, "NODE_RANK",
                                 /*all_required=*/true);
    if (info.ok()) {
      info->run_dir = *run_dir;
      // Ranks on other nodes: node 0's launcher serves the store.
      info->store_is_external = info->world_size != info->local_world_size;
      ReadAttempt(env, info);
    }
  } else if (IsTorchElastic(env)) {
    info = FromTorchrunVariables(env, ClusterKind::kTorchElastic, "GROUP_RANK",
                                 /*all_required=*/true);
    if (info.ok()) {
      info->store_is_external = env("TORCHELASTIC_USE_AGENT_STORE") == "True";
      ReadAttempt(env, info);
    }
  } else if (IsSlurmBatchJob(env)) {
    info = FromSlurm(env);
  } else {
    info = FromTorchrunVariables(env, ClusterKind::kEnv,
                                 env("NODE_RANK").has_value() ? "NODE_RANK" : "GROUP_RANK",
                                 /*all_required=*/false);
  }
  if (!info.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the cluster environment: ", info.status().message()));
  }
  if (absl::Status valid = Validate(*info); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid ", ClusterKindName(info->kind),
                                                   " cluster environment: ", valid.message()));
  }
  return info;
}

}  // namespace ddpspawn
