// Running a run's command inside a rank, and the strategy options its ranks are launched with (see
// run_command.h).
#include "core/train/run/run_command.h"

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/env/cluster_environment.h"
#include "core/env/settings.h"
#include "core/model/module.h"
#include "core/model/sharded_checkpoint.h"
#include "core/model/weights_io.h"
#include "core/strategy/precision.h"
#include "core/train/callbacks/early_stopping.h"
#include "core/train/callbacks/lr_monitor.h"
#include "core/train/callbacks/lr_scheduler.h"
#include "core/train/callbacks/model_checkpoint.h"
#include "core/train/data/dataset.h"
#include "core/train/loop/checkpoint_connector.h"
#include "core/train/loop/fit_result.h"
#include "core/train/loop/trainer.h"
#include "core/train/run/elastic_fit.h"
#include "core/train/run/run_inputs.h"
#include "core/util/files.h"
#include "core/util/output_dir.h"
#include "core/util/process_state.h"
#include "core/util/status_macros.h"
#include "core/util/tensor_memory.h"

namespace ddpspawn {

StrategyOptions StrategyOptionsFor(const RunConfig& config) {
  StrategyOptions options;
  options.accelerator = config.accelerator;
  options.parallel_devices.clear();
  for (int index : config.device_indices) {
    options.parallel_devices.push_back(
        config.accelerator == Accelerator::kCuda
            ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index))
            : c10::Device(c10::kCPU));
  }
  options.process_group_backend = config.process_group_backend;
  options.start_method = config.start_method;
  options.timeout = absl::Seconds(config.timeout_s);
  options.num_nodes = config.nnodes;
  options.node_rank = config.node_rank;
  options.master_addr = config.master_addr;
  if (config.master_port != 0) options.master_port = config.master_port;
  // Every node restarts alike, or the rendezvous refuses the mismatch.
  options.job_description =
      absl::StrCat("ddpspawn ", CommandName(config.command), " model=", config.model,
                   " max_restarts=", config.max_restarts);
  // Forked ranks open their data, model and outputs by name: they need none of the caller's
  // descriptors (which would otherwise stay open, e.g. a pipe's write end its reader waits on, for
  // the whole run).
  options.fork_close_descriptors = true;
  options.ddp_comm_hook = config.ddp_comm_hook;
  options.ddp.reducer.find_unused_parameters = config.find_unused_parameters;
  options.ddp.reducer.static_graph = config.static_graph;
  options.sync_batchnorm = config.sync_batchnorm;
  options.ddp.reducer.gradient_as_bucket_view = config.gradient_as_bucket_view;
  options.sharding_strategy = config.sharding_strategy;
  options.auto_wrap_min_params = config.auto_wrap_min_params;
  options.reshard_after_forward = config.reshard_after_forward;
  options.full_shard_prefetch = config.full_shard_prefetch;
  options.ddp.reducer.bucket_cap_mb = config.bucket_cap_mb;
  options.ddp.reducer.first_bucket_cap_mb = config.first_bucket_cap_mb;
  options.ddp.broadcast_buffers = config.broadcast_buffers;
  // The option table keeps powersgd_rank >= 1 and powersgd_start_iteration >= 0, which is all
  // MakePowerSgdState checks.
  absl::StatusOr<std::shared_ptr<PowerSgdState>> powersgd = MakePowerSgdState(
      config.ddp_comm_hook, config.powersgd_rank, config.powersgd_start_iteration);
  if (powersgd.ok()) options.ddp_comm_state = *std::move(powersgd);
  options.ddp_comm_wrapper = config.ddp_comm_wrapper == "fp16"   ? CommWrapper::kFp16
                             : config.ddp_comm_wrapper == "bf16" ? CommWrapper::kBf16
                                                                 : CommWrapper::kNone;
  options.post_localsgd.start_iteration = config.post_localsgd_start_iteration;
  options.post_localsgd.gradient_allreduce_within_node = config.post_local_gradient_allreduce;
  options.post_localsgd.model_averaging_period = config.model_averaging_period;
  options.precision_plugin = MakePrecisionPlugin(config.precision);
  options.min_ranks = config.min_ranks;
  // Elastic: max_restarts starts lost ranks again, which join at a commit; the job is not restarted
  // whole.
  if (config.min_ranks > 0) options.max_replacements = config.max_restarts;
  return options;
}

namespace {

absl::Status WritePredictions(const at::Tensor& predictions, const std::string& path) {
  at::Tensor rows = predictions.reshape({predictions.size(0), -1}).to(at::kDouble);
  std::string text;
  auto a = rows.accessor<double, 2>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    for (int64_t j = 0; j < rows.size(1); ++j) {
      absl::StrAppendFormat(&text, "%s%.17g", j ? "," : "", a[i][j]);
    }
    text += "\n";
  }
  return WriteFileAtomically(path, text, /*durable=*/false, /*mode=*/0644);
}

// The callbacks the run's options ask for, added to `options` in the order fit calls them; the
// ModelCheckpoint among them (null when none), whose best model the result names.
std::shared_ptr<ModelCheckpoint> AddFitCallbacks(const RunConfig& config, TrainerOptions& options) {
  std::shared_ptr<ModelCheckpoint> model_checkpoint;
  if (ModelCheckpointEnabled(config.model_checkpoint)) {
    model_checkpoint = std::make_shared<ModelCheckpoint>(config.model_checkpoint);
    options.callbacks.push_back(model_checkpoint);
  }
  if (!config.early_stopping.monitor.empty()) {
    options.callbacks.push_back(std::make_shared<EarlyStopping>(config.early_stopping));
  }
  // The schedule before the monitor: at an epoch's start it sets the rate the monitor then logs.
  if (config.lr_scheduler.schedule != LrSchedule::kNone) {
    options.callbacks.push_back(std::make_shared<LrScheduler>(config.lr_scheduler));
  }
  if (config.lr_monitor != LoggingInterval::kNone) {
    options.callbacks.push_back(
        std::make_shared<LearningRateMonitor>(config.lr_monitor, config.trainer.log_every_n_steps));
  }
  return model_checkpoint;
}

absl::StatusOr<std::string> RunResolvedCommand(const RunConfig& config,
                                               DDPSpawnStrategy& strategy) {
  ASSIGN_OR_RETURN(Dataset data, PrimaryData(config));
  // The model's initial weights come from the seed (DDP then gives every rank rank 0's).
  at::manual_seed(config.trainer.seed);
  ASSIGN_OR_RETURN(std::shared_ptr<LightningModule> module, LoadModel(config, data));
  if (!config.checkpoint.empty()) {
    absl::Status s;
    if (IsShardedCheckpoint(config.checkpoint)) {
      // Its weights assembled whole, as evaluation and a fresh fit's start hold them.
      s = LoadWeightsAt(config.checkpoint, *module);
    } else {  // through the strategy's CheckpointIO
      ASSIGN_OR_RETURN(std::string bytes, strategy.LoadCheckpoint(config.checkpoint));
      s = LoadWeightsFromAnyFormat(bytes, *module);
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", config.checkpoint, ": ", s.message()));
    }
  }
  // Rank 0 writes every output (and is the rank that reports a bad directory).
  if (strategy.is_global_zero()) {
    RETURN_IF_ERROR(PrepareOutputDirectory(config.trainer.default_root_dir));
  }
  if (config.command == Command::kFit) {
    TrainerOptions options = config.trainer;
    options.hyperparameters = GivenOptionValues(config);
    const std::shared_ptr<ModelCheckpoint> model_checkpoint = AddFitCallbacks(config, options);
    std::optional<Dataset> val;
    if (!config.val.empty()) {
      ASSIGN_OR_RETURN(Dataset loaded, LoadData(config, "val", config.val, config.val_labels));
      val = std::move(loaded);
    }
    std::string text;
    if (config.min_ranks > 0) {
      ASSIGN_OR_RETURN(ElasticFitResult elastic,
                       ElasticFit(strategy, std::move(options), config.elastic_commit_every_n_steps,
                                  module, data, val ? &*val : nullptr));
      text = absl::StrCat(elastic.fit.Encode(), elastic.keys);
    } else {
      Trainer trainer(strategy, std::move(options));
      ASSIGN_OR_RETURN(FitResult result, trainer.Fit(module, data, val ? &*val : nullptr));
      text = result.Encode();
    }
    if (const std::shared_ptr<PowerSgdState>& powersgd = strategy.options().ddp_comm_state) {
      // What the last compressed step sent, against the dense all-reduce (0 and 0 before
      // powersgd_start_iteration).
      absl::StrAppend(&text, "powersgd.sent_elements=", powersgd->last_sent_elements,
                      "\npowersgd.dense_elements=", powersgd->last_dense_elements, "\n");
    }
    if (model_checkpoint != nullptr && !model_checkpoint->best_model_path().empty()) {
      absl::StrAppend(&text, "best_model_path=",
                      std::filesystem::absolute(model_checkpoint->best_model_path()).string(),
                      "\n");
      if (!config.model_checkpoint.monitor.empty()) {
        absl::StrAppendFormat(&text, "best_model_score=%.17g\n",
                              model_checkpoint->best_model_score());
      }
    }
    return text;
  }
  Trainer trainer(strategy, config.trainer);
  if (config.command == Command::kPredict) {
    ASSIGN_OR_RETURN(at::Tensor predictions, trainer.Predict(module, data));
    if (!strategy.is_global_zero()) return std::string();
    const std::string path = config.trainer.default_root_dir + "/predictions.csv";
    RETURN_IF_ERROR(WritePredictions(predictions, path));
    return absl::StrCat("predictions=", std::filesystem::absolute(path).string(),
                        "\ncount=", predictions.size(0), "\n");
  }
  absl::StatusOr<std::map<std::string, double>> metrics = config.command == Command::kTest
                                                              ? trainer.Test(module, data)
                                                              : trainer.Validate(module, data);
  if (!metrics.ok()) return metrics.status();
  std::string text;
  for (const auto& [name, value] : *metrics) {
    absl::StrAppendFormat(&text, "metric.%s=%.17g\n", name, value);
  }
  return text;
}

// Who started this job again, when a scheduler did and its previous run left `last`: SLURM, which
// requeued it (after checkpoint_on_signal stopped it, say), or torchrun's agent, which restarted
// every worker (--max-restarts) of a job of one node and is this process's parent. A torchrun
// restart trusts `last` only when it was written after the agent started (else it is another
// job's); a requeued SLURM job trusts it as it is (its run started before). nullopt otherwise.
std::optional<std::string> StartedAgainBy(const ClusterInfo& cluster, const std::string& last) {
  std::error_code error;
  if (!std::filesystem::exists(last, error)) return std::nullopt;
  if (std::optional<SlurmJob> slurm = DetectSlurmJob(); slurm && slurm->restart_count > 0) {
    return absl::StrFormat("SLURM requeued job %s (SLURM_RESTART_COUNT=%d)", slurm->job_id,
                           slurm->restart_count);
  }
  // One node's ranks share the agent and the file; across nodes each agent started at its own time
  // (one joining a MIN:MAX job later), and the ranks could decide differently.
  if (cluster.kind != ClusterKind::kTorchElastic || cluster.attempt == 0 ||
      cluster.world_size != cluster.local_world_size) {
    return std::nullopt;
  }
  absl::StatusOr<absl::Time> agent_started = ReadProcessStartTime(getppid());
  struct stat written {};
  if (!agent_started.ok() || stat(last.c_str(), &written) != 0 ||
      absl::TimeFromTimespec(written.st_mtim) < *agent_started) {
    return std::nullopt;
  }
  return absl::StrFormat("torchrun restarted its workers (TORCHELASTIC_RESTART_COUNT=%d)",
                         cluster.attempt);
}

}  // namespace

absl::StatusOr<std::string> RunCommand(const RunConfig& config, DDPSpawnStrategy& strategy) {
  InstallTensorMemoryCounter();  // for fit's peak_tensor_bytes: this process is a rank of the run
  // A restarted job's ranks continue from what its launcher chose.
  if (std::optional<std::string> resume = ReadSetting(Setting::kResumeFrom)) {
    RunConfig resumed = config;
    resumed.trainer.resume_from = *resume;
    return RunResolvedCommand(resumed, strategy);
  }
  // A job its scheduler started again continues from the checkpoint its previous run left.
  const std::string last = LastCheckpointPath(config.trainer);
  if (config.command == Command::kFit && config.trainer.resume_from.empty()) {
    if (std::optional<std::string> who = StartedAgainBy(strategy.cluster(), last)) {
      if (strategy.is_global_zero()) {
        std::fprintf(stderr, "ddpspawn: %s: continuing from %s\n", who->c_str(),
                     std::filesystem::absolute(last).c_str());
      }
      RunConfig resumed = config;
      resumed.trainer.resume_from = last;
      return RunResolvedCommand(resumed, strategy);
    }
  }
  return RunResolvedCommand(config, strategy);
}

}  // namespace ddpspawn
