// Parsing run options into a RunConfig (by run_option_table's one table of every option), resolving
// them against the environment, and their help text (see run_options.h).
#include "core/train/run/run_options.h"

#include <c10/core/Device.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/post_local_sgd.h"
#include "core/ddp/sharding_strategy.h"
#include "core/env/cluster_environment.h"
#include "core/launch/launcher.h"
#include "core/strategy/precision.h"
#include "core/train/callbacks/callback.h"
#include "core/train/loop/optimizer_factory.h"
#include "core/train/run/run_option_table.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// Lightning's devices: "N" devices (cuda:0..N-1, or N CPU ranks) or a list of CUDA indices ("0,2").
// Sets nproc_per_node and device_indices.
absl::Status ResolveDevices(RunConfig& config) {
  if (config.devices.empty()) {
    config.device_indices.resize(config.nproc_per_node);
    std::iota(config.device_indices.begin(), config.device_indices.end(), 0);
    return absl::OkStatus();
  }
  // A count is at most the launcher's limit; an index must fit c10::DeviceIndex (int8_t), which
  // StrategyOptionsFor narrows it to.
  constexpr int kMaxIndex = std::numeric_limits<c10::DeviceIndex>::max();
  std::vector<int> indices;
  const bool list = absl::StrContains(config.devices, ',');
  for (absl::string_view part : absl::StrSplit(config.devices, ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &value) || value < 0 ||
        (!list && value == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("option devices: '", config.devices,
                       "' is neither a device count (2) nor a list of CUDA indices (0,2)"));
    }
    if (list ? value > kMaxIndex : value > kMaxNprocs) {
      return absl::InvalidArgumentError(
          absl::StrCat("option devices='", config.devices, "': expected ",
                       list ? absl::StrCat("CUDA indices in [0, ", kMaxIndex, "]")
                            : absl::StrCat("a device count in [1, ", kMaxNprocs, "]")));
    }
    indices.push_back(value);
  }
  if (list && config.accelerator != Accelerator::kCuda) {
    return absl::InvalidArgumentError(
        "option devices: a list of device indices needs --accelerator cuda");
  }
  if (list && indices.size() > static_cast<size_t>(kMaxNprocs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("option devices: expected at most ", kMaxNprocs, " CUDA indices"));
  }
  if (!list) {
    const int count = indices[0];
    indices.resize(count);
    std::iota(indices.begin(), indices.end(), 0);
  }
  const int count = static_cast<int>(indices.size());
  if (config.nproc_per_node != 1 && config.nproc_per_node != count) {
    return absl::InvalidArgumentError(absl::StrCat("option devices gives ", count,
                                                   " devices but nproc_per_node is ",
                                                   config.nproc_per_node, "; give one of them"));
  }
  config.nproc_per_node = count;
  config.device_indices = std::move(indices);
  return absl::OkStatus();
}

// min_ranks: what elastic fit can go on with today (see elastic_fit.h).
absl::Status CheckElastic(const RunConfig& config, Command command) {
  if (config.min_ranks == 0) {
    if (config.given.count("elastic_commit_every_n_steps") > 0) {
      return absl::InvalidArgumentError(
          "elastic_commit_every_n_steps is for an elastic fit; set min_ranks too");
    }
    return absl::OkStatus();
  }
  auto refuse = [](absl::string_view with) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_ranks (elastic fit) does not go with ", with, " yet"));
  };
  if (command != Command::kFit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_ranks is for fit (which commits the state its survivors continue from), not ",
        CommandName(command)));
  }
  if (config.min_ranks > config.nproc_per_node) {
    return absl::InvalidArgumentError(absl::StrCat("min_ranks ", config.min_ranks,
                                                   " is more than the job's nproc_per_node ",
                                                   config.nproc_per_node));
  }
  if (config.nnodes > 1) return refuse("nnodes > 1: a job of several nodes cannot lose one");
  if (config.sharding_strategy != ShardingStrategy::kNoShard ||
      config.trainer.zero_redundancy_optimizer) {
    return refuse(
        "sharded training (sharding_strategy, zero_redundancy_optimizer): a lost rank takes its "
        "shard of the state with it");
  }
  if (config.ddp_comm_hook != CommHookKind::kAllReduce) {
    return refuse(absl::StrCat("ddp_comm_hook ", CommHookName(config.ddp_comm_hook),
                               ", whose state is each rank's own"));
  }
  if (EpochsLimited(config.trainer)) {
    return refuse(
        "limit_train_batches or overfit_batches: their batch counts are of whole epochs, and the "
        "survivors deal the rest of one");
  }
  return absl::OkStatus();
}

// Under torchrun, srun or a hand-set WORLD_SIZE this process is one rank of that job
// (DDPSpawnStrategy::Launch joins it): the job's shape comes from there. Options that would
// describe another shape are refused, not ignored.
absl::Status AdoptOuterJob(RunConfig& config, const std::set<std::string>& given,
                           const absl::StatusOr<ClusterInfo>& outer) {
  // A broken environment is reported by Launch(), which reads it again.
  if (!outer.ok() || !CreatesProcessesExternally(*outer)) return absl::OkStatus();
  for (const char* key :
       {"nnodes", "node_rank", "master_addr", "master_port", "max_restarts", "min_ranks"}) {
    if (given.count(key) == 0) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("option ", key, ": this process is rank ", outer->rank, " of a ",
                     ClusterKindName(outer->kind), " job of ", outer->world_size,
                     " processes, which sets the nodes and the rendezvous; leave ", key, " out"));
  }
  if (given.count("nproc_per_node") == 0 && given.count("devices") == 0) {
    config.nproc_per_node = outer->local_world_size;
  }
  config.world_size = outer->world_size;
  return absl::OkStatus();
}

}  // namespace

constexpr NamedValue<Command> kCommandNames[] = {
    {"fit", Command::kFit},
    {"validate", Command::kValidate},
    {"test", Command::kTest},
    {"predict", Command::kPredict},
};

absl::string_view CommandName(Command command) { return NameOf(kCommandNames, command); }

absl::StatusOr<Command> ParseCommand(absl::string_view name) {
  return ParseName(kCommandNames, "command", name);
}

absl::StatusOr<RunConfig> ParseRunOptions(const std::string& command_name,
                                          const RunOptions& options) {
  RunConfig config;
  ASSIGN_OR_RETURN(const Command command, ParseCommand(command_name));
  config.command = command;
  std::set<std::string>& given = config.given;
  for (const auto& [raw_key, value] : options) {
    std::string key = raw_key;
    std::replace(key.begin(), key.end(), '-', '_');
    given.insert(key);
    const RunOption* option = FindRunOption(key);
    if (option == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", raw_key, "' (see --help for the options)"));
    }
    if (absl::Status s = option->access.set(config, value); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("option ", raw_key, "='", value, "': ", s.message()));
    }
  }
  return config;
}

namespace {

// The sharding options against each other and the communication hook.
absl::Status CheckShardingOptions(const RunConfig& config) {
  RETURN_IF_ERROR(CheckShardingStrategy(
      config.sharding_strategy, config.trainer.zero_redundancy_optimizer,
      config.ddp_comm_wrapper != "none" ? absl::StrCat(config.ddp_comm_wrapper, "_compress_wrapper")
                                        : std::string(CommHookName(config.ddp_comm_hook))));
  if (config.sharding_strategy != ShardingStrategy::kFullShard &&
      (config.auto_wrap_min_params != 0 || !config.reshard_after_forward ||
       !config.full_shard_prefetch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.auto_wrap_min_params != 0 ? "auto_wrap_min_params"
        : !config.reshard_after_forward  ? "reshard_after_forward false"
                                         : "full_shard_prefetch false",
        " needs sharding_strategy full_shard (it shapes how full_shard gathers the parameters)"));
  }
  if (config.state_dict_type == "sharded" &&
      config.sharding_strategy == ShardingStrategy::kNoShard) {
    return absl::InvalidArgumentError(
        "state_dict_type sharded needs sharding_strategy shard_grad_op or full_shard (each rank "
        "writes its own rows of the parameters and of the optimizer state); under no_shard, with "
        "or without zero_redundancy_optimizer, a checkpoint holds the unsharded state");
  }
  return absl::OkStatus();
}

// What no single option says: the options against each other, once the environment has resolved
// them.
absl::Status CheckConsistent(const RunConfig& config) {
  const Command command = config.command;
  RETURN_IF_ERROR(CheckEarlyStoppingOptions(config.early_stopping));
  RETURN_IF_ERROR(CheckModelCheckpointOptions(config.model_checkpoint));
  RETURN_IF_ERROR(CheckLrSchedulerOptions(config.lr_scheduler));
  RETURN_IF_ERROR(CheckOptimizerConfig(config.optimizer));
  if (config.lr_scheduler.interval == LrInterval::kEpoch && config.trainer.max_epochs < 1 &&
      (config.lr_scheduler.schedule == LrSchedule::kCosine ||
       config.lr_scheduler.schedule == LrSchedule::kOneCycle)) {
    return absl::InvalidArgumentError(
        "lr_scheduler_interval epoch needs max_epochs >= 1 to spread the schedule over");
  }
  if (config.lr_scheduler.schedule != LrSchedule::kNone && config.optimizer.step_lr_every > 0) {
    return absl::InvalidArgumentError(
        "lr_scheduler and step_lr_every are two schedules for one rate: choose one");
  }
  if (config.model.empty()) return absl::InvalidArgumentError("option model is required");
  if (command == Command::kFit && config.train.empty()) {
    return absl::InvalidArgumentError("fit needs option train (a CSV or .npy file)");
  }
  if (command != Command::kFit && config.data.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(CommandName(command), " needs option data"));
  }
  if (config.node_rank >= config.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("option node_rank=", config.node_rank,
                                                   " is outside [0, nnodes=", config.nnodes, ")"));
  }
  if (config.nnodes == 1 && (!config.master_addr.empty() || config.master_port != 0)) {
    return absl::InvalidArgumentError(
        "master_addr and master_port are for nnodes > 1: the ranks of one node meet privately "
        "(a directory only this user can enter)");
  }
  if (config.max_restarts > 0 && command != Command::kFit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_restarts is for fit (which writes the checkpoint a restart continues "
                     "from), not ",
                     CommandName(command)));
  }
  RETURN_IF_ERROR(CheckElastic(config, command));
  for (const char* key : {"powersgd_rank", "powersgd_start_iteration"}) {
    if (config.given.count(key) > 0 && !IsPowerSgd(config.ddp_comm_hook)) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " is ddp_comm_hook powersgd's; this run's hook is ",
                       CommHookName(config.ddp_comm_hook)));
    }
  }
  const bool post_local = config.ddp_comm_hook == CommHookKind::kPostLocalSgd;
  for (const char* key : {"post_localsgd_start_iteration", "post_local_gradient_allreduce",
                          "model_averaging_period"}) {
    if (config.given.count(key) > 0 && !post_local) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " is ddp_comm_hook post_localsgd's; this run's hook is ",
                       CommHookName(config.ddp_comm_hook)));
    }
  }
  if (post_local && config.given.count("model_averaging_period") == 0) {
    return absl::InvalidArgumentError(
        "ddp_comm_hook post_localsgd needs model_averaging_period (as Lightning's DDPStrategy "
        "does): without averaging the ranks' models drift apart for good once local steps start");
  }
  if (post_local && config.trainer.zero_redundancy_optimizer) {
    return ZeroRedundancyWithLocalSgdError();
  }
  RETURN_IF_ERROR(CheckShardingOptions(config));
  if (config.nnodes > 1 && config.master_addr.empty()) {
    return absl::InvalidArgumentError(
        "nnodes > 1 needs master_addr: node 0's address, the same on every node");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveRunConfig(RunConfig& config, const RunEnvironment& environment) {
  RETURN_IF_ERROR(AdoptOuterJob(config, config.given, environment.outer));
  config.trainer.sharded_checkpoints = config.state_dict_type == "sharded";
  if (config.checkpoint_on_signal == "SIGUSR1" ||
      (config.checkpoint_on_signal == "auto" && environment.in_slurm_job)) {
    config.trainer.checkpoint_on_signal = SIGUSR1;
  } else if (config.checkpoint_on_signal == "SIGUSR2") {
    config.trainer.checkpoint_on_signal = SIGUSR2;
  }
  RETURN_IF_ERROR(ResolveDevices(config));
  RETURN_IF_ERROR(CheckConsistent(config));
  if (config.world_size == 0) config.world_size = config.nnodes * config.nproc_per_node;
  return absl::OkStatus();
}

RunEnvironment ThisProcessEnvironment() {
  return RunEnvironment{DetectClusterEnvironment(), DetectSlurmJob().has_value()};
}

absl::StatusOr<RunConfig> ParseRunConfig(const std::string& command_name,
                                         const RunOptions& options) {
  ASSIGN_OR_RETURN(RunConfig config, ParseRunOptions(command_name, options));
  RETURN_IF_ERROR(ResolveRunConfig(config, ThisProcessEnvironment()));
  return config;
}

std::vector<RunOptionRow> RunOptionRows() {
  const RunConfig defaults;
  std::vector<RunOptionRow> rows;
  for (const RunOption& option : RunOptionTable()) {
    rows.push_back({option.key, option.section, option.value, option.access.show(defaults)});
  }
  return rows;
}

std::map<std::string, std::string> GivenOptionValues(const RunConfig& config) {
  std::map<std::string, std::string> values;
  for (const RunOption& option : RunOptionTable()) {
    if (config.given.count(option.key) > 0) values[option.key] = option.access.show(config);
  }
  return values;
}

std::string RunOptionsHelp() {
  constexpr size_t kWidth = 100;  // the column limit of the text
  constexpr size_t kIndent = 30;  // where descriptions start
  const RunConfig defaults;
  std::string text, section;
  for (const RunOption& option : RunOptionTable()) {
    if (option.section != section) {
      section = option.section;
      absl::StrAppend(&text, section, ":\n");
    }
    std::string flag = option.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::string head = absl::StrCat("  --", flag, " ", option.value);
    std::string help = option.help;
    const std::string shown = option.access.show(defaults);
    if (!shown.empty()) absl::StrAppend(&help, help.empty() ? "" : " ", "(default ", shown, ")");
    if (help.empty()) {
      absl::StrAppend(&text, head, "\n");
      continue;
    }
    // Wraps the description at word boundaries into the column after the flag.
    std::string line = head.size() + 1 < kIndent
                           ? absl::StrCat(head, std::string(kIndent - head.size(), ' '))
                           : absl::StrCat(head, "\n", std::string(kIndent, ' '));
    size_t line_start = line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1;
    bool first_word = true;
    for (absl::string_view word : absl::StrSplit(help, ' ', absl::SkipEmpty())) {
      if (!first_word && line.size() - line_start + 1 + word.size() > kWidth) {
        absl::StrAppend(&line, "\n", std::string(kIndent, ' '));
        line_start = line.size() - kIndent;
        first_word = true;
      }
      absl::StrAppend(&line, first_word ? "" : " ", word);
      first_word = false;
    }
    absl::StrAppend(&text, line, "\n");
  }
  absl::StrAppend(&text,
                  "Numbers: integers out of an option's range and non-finite numbers (inf, nan, "
                  "1e400) are errors.\n");
  return text;
}

}  // namespace ddpspawn
