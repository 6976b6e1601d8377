// The options of one training run (what the CLI's flags, the C ABI's key=value options and the
// bindings all pass): RunConfig, parsing the options into it, and their help text.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTIONS_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTIONS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/env/cluster_environment.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/callbacks/early_stopping.h"
#include "core/train/callbacks/lr_monitor.h"
#include "core/train/callbacks/lr_scheduler.h"
#include "core/train/callbacks/model_checkpoint.h"
#include "core/train/loop/trainer_options.h"
#include "core/util/option_defaults.h"

namespace ddpspawn {

// Key-value pairs. Every key is also a CLI flag (--max-epochs or --max_epochs); the keys, their
// values and defaults are listed by RunOptionsHelp() (`ddpspawn --help`).
using RunOptions = std::vector<std::pair<std::string, std::string>>;

// What a run does (the CLI's first word).
enum class Command { kFit, kValidate, kTest, kPredict };
absl::string_view CommandName(Command command);
absl::StatusOr<Command> ParseCommand(absl::string_view name);

struct RunConfig {
  Command command = Command::kFit;
  std::string model;
  std::string train, train_labels, val, val_labels, data, data_labels;
  int label_column = -1;
  std::string checkpoint;
  TrainerOptions trainer;
  // Fit's callbacks, made from these (their defaults add none).
  EarlyStoppingOptions early_stopping;
  ModelCheckpointOptions model_checkpoint;
  LoggingInterval lr_monitor = LoggingInterval::kNone;
  OptimizerConfig optimizer;
  LrSchedulerOptions lr_scheduler;  // beside optimizer.step_lr_every, not with it
  int nproc_per_node = 1;
  Accelerator accelerator = Accelerator::kCpu;
  // Lightning's devices: a count ("2") or CUDA indices ("0,2"); sets nproc_per_node. Empty:
  // nproc_per_node devices (cuda:0.. on cuda).
  std::string devices;
  std::optional<Backend> process_group_backend;  // none: by accelerator
  std::vector<int> device_indices;               // from devices: local rank i's CUDA index
  int nnodes = 1;
  // Every rank of the job: nnodes * nproc_per_node, or the outer launcher's WORLD_SIZE when
  // torchrun or srun started this process (set by ResolveRunConfig).
  int world_size = 0;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  // torchrun's --max-restarts: when a rank fails, start the ranks again (up to this many times),
  // continuing from the checkpoint this job wrote last.
  int max_restarts = 0;
  // Elastic fit (core/train/run/elastic_fit.h): a rank lost (killed, crashed) is dropped while at
  // least min_ranks go on, which continue from their last in-memory commit, taken every
  // elastic_commit_every_n_steps optimizer steps. 0: a lost rank fails the job.
  int min_ranks = 0;
  int64_t elastic_commit_every_n_steps = 20;
  // fit: on this signal, save the checkpoint and stop ("SIGUSR1", "SIGUSR2", "none"); "auto":
  // SIGUSR1 inside a SLURM job, else none. Resolved into trainer.checkpoint_on_signal by
  // ResolveRunConfig.
  std::string checkpoint_on_signal = "auto";
  // The CLI's default (ddpspawn_run forks): the launch costs what spawn's does, each rank about
  // 0.65x spawn's memory, and a restart reuses the server (docs/performance.md).
  StartMethod start_method = StartMethod::kForkserver;
  // The process group's timeout for joining and for each collective (Lightning's DDPStrategy
  // timeout): a rank that does not arrive in time fails the job with what every rank was last
  // doing.
  double timeout_s = absl::ToDoubleSeconds(kDefaultTimeout);
  Precision precision = Precision::k32True;
  CommHookKind ddp_comm_hook = CommHookKind::kAllReduce;
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool sync_batchnorm = false;
  bool gradient_as_bucket_view = true;
  ShardingStrategy sharding_strategy = ShardingStrategy::kNoShard;
  int64_t auto_wrap_min_params = 0;  // full_shard's size-based units; 0: the model's own
  bool reshard_after_forward = true;
  bool full_shard_prefetch = true;
  // "full" or "sharded"; resolved into trainer.sharded_checkpoints by ResolveRunConfig.
  std::string state_dict_type = "full";
  double bucket_cap_mb = DDPSPAWN_DEFAULT_BUCKET_CAP_MB;
  double first_bucket_cap_mb = DDPSPAWN_DEFAULT_FIRST_BUCKET_CAP_MB;
  bool broadcast_buffers = true;
  // ddp_comm_hook powersgd's matrix approximation rank.
  int powersgd_rank = DDPSPAWN_DEFAULT_POWERSGD_RANK;
  int64_t powersgd_start_iteration = DDPSPAWN_DEFAULT_POWERSGD_START_ITERATION;
  // ddp_comm_hook post_localsgd's (core/ddp/post_local_sgd.h).
  int64_t post_localsgd_start_iteration = 0;
  bool post_local_gradient_allreduce = true;
  int64_t model_averaging_period = 0;
  // Lightning's ddp_comm_wrapper: "none", "fp16" or "bf16", around the hook.
  std::string ddp_comm_wrapper = "none";
  // The keys the options named (set by ParseRunConfig), so that a value given can be told from a
  // default.
  std::set<std::string> given;
};

// The command and its options as a RunConfig, from them alone (no environment is read): unknown
// keys and bad values are errors that name the key. ResolveRunConfig() completes it.
absl::StatusOr<RunConfig> ParseRunOptions(const std::string& command_name,
                                          const RunOptions& options);

// What a run's process finds around it.
struct RunEnvironment {
  // DetectClusterEnvironment()'s: an outer job (torchrun, srun) sets the shape.
  absl::StatusOr<ClusterInfo> outer = ClusterInfo{};
  bool in_slurm_job = false;  // checkpoint_on_signal "auto" is SIGUSR1 there
};
RunEnvironment ThisProcessEnvironment();

// Completes a parsed config against `environment`: an outer job's shape (nproc_per_node,
// world_size; options that would contradict it are errors), checkpoint_on_signal into
// trainer.checkpoint_on_signal, devices into device_indices; then checks the options against each
// other (a required one missing, two that cannot go together), and sets world_size.
absl::Status ResolveRunConfig(RunConfig& config, const RunEnvironment& environment);

// ParseRunOptions(), then ResolveRunConfig() against this process's environment.
absl::StatusOr<RunConfig> ParseRunConfig(const std::string& command_name,
                                         const RunOptions& options);

// The help text of the options.
std::string RunOptionsHelp();

// One row of the option table, for tools that document it (tools/front_ends.py).
struct RunOptionRow {
  std::string key;            // "max_epochs"
  std::string section;        // "Trainer"
  std::string value;          // "N"
  std::string default_value;  // as the table shows it; "" when none is shown
};
std::vector<RunOptionRow> RunOptionRows();

// The options `config.given` names, each with its value as the option table shows it: the run's
// hyperparameters, for the loggers.
std::map<std::string, std::string> GivenOptionValues(const RunConfig& config);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTIONS_H_
