// The Trainer (see trainer.h): a fit's start and end, checkpoints, logging and the optimizer. Its
// loops are beside it: fit_loop.cc (the epochs) and evaluation_loop.cc (validate, test, predict);
// what they use but do not own is in optimizer_factory, stop_signal, checkpoint_connector,
// metric_sync and fit_result.
#include "core/train/loop/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/optim.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/ddp/post_local_sgd.h"
#include "core/ddp/shard_grad_op_optimizer.h"
#include "core/ddp/zero_redundancy_optimizer.h"
#include "core/model/sharded_checkpoint.h"
#include "core/train/data/sampler.h"
#include "core/train/loggers/logger_factory.h"
#include "core/train/loop/fit_run.h"
#include "core/train/loop/logged_metrics.h"
#include "core/train/loop/metric_sync.h"
#include "core/train/loop/stop_signal.h"
#include "core/util/output_dir.h"
#include "core/util/status_macros.h"
#include "core/util/tensor_memory.h"

namespace ddpspawn {
namespace {

// fast_dev_run's few batches of every loop, in one epoch, without the callbacks that write or stop.
TrainerOptions WithFastDevRun(TrainerOptions options) {
  if (options.fast_dev_run <= 0) return options;
  const BatchAmount few = BatchAmount::Count(options.fast_dev_run);
  options.limit_train_batches = options.limit_val_batches = few;
  options.limit_test_batches = options.limit_predict_batches = few;
  options.max_epochs = 1;
  options.max_steps = -1;
  options.num_sanity_val_steps = 0;
  options.val_check_interval = BatchAmount::All();
  options.check_val_every_n_epoch = 1;
  std::vector<std::shared_ptr<Callback>> kept;
  for (std::shared_ptr<Callback>& callback : options.callbacks) {
    if (callback == nullptr || callback->RunsInFastDevRun()) kept.push_back(std::move(callback));
  }
  options.callbacks = std::move(kept);
  return options;
}

}  // namespace

Trainer::Trainer(DDPSpawnStrategy& strategy, TrainerOptions options)
    : strategy_(strategy), options_(WithFastDevRun(std::move(options))) {}

absl::Status Trainer::Prepare(const std::shared_ptr<LightningModule>& module) {
  if (module == nullptr) return absl::InvalidArgumentError("the trainer needs a module");
  if (options_.batch_size < 1) return absl::InvalidArgumentError("batch_size must be >= 1");
  if (options_.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  if (options_.num_threads > kMaxNumThreads) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads ", options_.num_threads,
                                                   " is above ", kMaxNumThreads,
                                                   " (0: cores / local ranks)"));
  }
  int threads = options_.num_threads;
  if (threads <= 0) {
    const int local =
        std::max(1, strategy_.group() ? strategy_.group()->cluster().local_world_size : 1);
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local);
  }
  at::set_num_threads(threads);
  if (strategy_.lightning_module() != module.get()) return strategy_.Setup(module);
  return absl::OkStatus();
}

absl::Status Trainer::Log(int64_t epoch, int64_t step, const std::string& name, double value) {
  last_metrics_[name] = value;
  epoch_metrics_[name] = value;
  return WriteMetricRow(epoch, step, name, value);
}

absl::Status Trainer::WriteMetricRow(int64_t epoch, int64_t step, const std::string& name,
                                     double value) {
  for (const std::unique_ptr<MetricLogger>& logger : loggers_) {  // rank 0's only
    RETURN_IF_ERROR(logger->LogMetric(epoch, step, name, value));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                                     TrainingState state, const std::string& path) {
  if (options_.sharded_checkpoints) {
    auto* sharded = dynamic_cast<ShardGradOpOptimizer*>(optimizer);
    if (sharded != nullptr) {
      // Each rank writes its rows; nothing is gathered, not even under full_shard.
      RETURN_IF_ERROR(CompleteCheckpointState(state));
      ASSIGN_OR_RETURN(std::string extra, SerializeTrainingState(state));
      return SaveShardedCheckpoint(path, module.named_state(), *sharded, extra);
    }
    if (strategy_.world_size() > 1) {
      return absl::FailedPreconditionError(
          "sharded_checkpoints needs a ShardGradOpOptimizer (sharding_strategy shard_grad_op or "
          "full_shard)");
    }
    // One process shards nothing: its checkpoint is the whole state, in one file.
  }
  // Rank 0 alone serializes the weights: under full_shard the others keep their rows.
  return WithParametersWhole(
      strategy_, [&] { return SaveWholeCheckpoint(module, optimizer, std::move(state), path); },
      /*only_rank=*/0);
}

absl::Status Trainer::SaveWholeCheckpoint(LightningModule& module,
                                          torch::optim::Optimizer* optimizer, TrainingState state,
                                          const std::string& path) {
  RETURN_IF_ERROR(CompleteCheckpointState(state));
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(optimizer)) {
    RETURN_IF_ERROR(sharded->ConsolidateStateDict(0));  // rank 0 saves the unsharded state
  }
  std::string bytes;
  if (strategy_.is_global_zero()) {
    ASSIGN_OR_RETURN(std::string serialized, SerializeCheckpoint(module, optimizer, state));
    bytes = std::move(serialized);
  }
  return strategy_.SaveCheckpoint(bytes, path);
}

absl::Status Trainer::CompleteCheckpointState(TrainingState& state) {
  ASSIGN_OR_RETURN(std::vector<at::Tensor> rng, GatherRngStates(strategy_));
  state.cpu_rng_per_rank = std::move(rng);
  state.world_size = strategy_.world_size();
  if (state.epoch_loss_batches > 0) {  // the same on every rank: they step together
    ASSIGN_OR_RETURN(at::Tensor sums,
                     strategy_.AllGather(at::tensor(state.epoch_loss_sum_per_rank, at::kDouble)));
    at::Tensor flat = sums.to(at::kCPU).contiguous().view(-1);
    state.epoch_loss_sum_per_rank.assign(flat.data_ptr<double>(),
                                         flat.data_ptr<double>() + flat.numel());
  }
  for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
    std::string callback_state = callback->OnSaveCheckpoint();
    if (!callback_state.empty())
      state.callback_states[callback->name()] = std::move(callback_state);
  }
  return absl::OkStatus();
}

absl::Status Trainer::CallHooks(const std::function<absl::Status(Callback&)>& hook) {
  for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
    RETURN_IF_ERROR(hook(*callback));
  }
  return absl::OkStatus();
}

absl::StatusOr<FitResult> Trainer::Fit(const std::shared_ptr<LightningModule>& module,
                                       const Dataset& train, const Dataset* validation) {
  absl::StatusOr<FitResult> result = FitAndReport(module, train, validation);
  if (!result.ok()) {
    for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
      callback->OnException(result.status());
    }
  }
  return result;
}

absl::StatusOr<FitResult> Trainer::FitAndReport(const std::shared_ptr<LightningModule>& module,
                                                const Dataset& train, const Dataset* validation) {
  ResetPeakTensorBytes();
  ASSIGN_OR_RETURN(std::unique_ptr<FitRun> run, StartFit(module, train));
  // overfit_batches validates on the batches it trains on (the first ones of each rank's unshuffled
  // shard; ForEachShardBatch's shards are the same).
  const bool overfit = !options_.overfit_batches.is_zero();
  if (overfit) validation = &train;
  run->val_limit = overfit ? options_.overfit_batches : options_.limit_val_batches;
  run->validates =
      validation != nullptr && options_.check_val_every_n_epoch > 0 && !run->val_limit.is_zero();
  StopSignal stop_signal(options_.checkpoint_on_signal);
  FitContext context(*this, *run);
  run->context = &context;
  RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnFitStart(context); }));
  if (run->validates && options_.num_sanity_val_steps != 0) {
    // Lightning's sanity check: a few validation batches before training; their metrics are not
    // logged.
    const BatchAmount sanity = options_.num_sanity_val_steps < 0
                                   ? BatchAmount::All()
                                   : BatchAmount::Count(options_.num_sanity_val_steps);
    RETURN_IF_ERROR(Evaluate(module, *validation, false, sanity, "num_sanity_val_steps").status());
  }
  ASSIGN_OR_RETURN(run->arrivals_at_start, Arrivals());
  run->arrivals_at_epoch = run->arrivals_at_start;
  run->profiler = std::make_unique<FitProfiler>(options_.profiler);
  if (strategy_.group() != nullptr) run->blocked_at_start = strategy_.group()->blocked_seconds();
  RETURN_IF_ERROR(run->profiler->Start());
  while (!run->stop && run->state.epoch < run->max_epochs) {
    RETURN_IF_ERROR(TrainEpoch(*run, train, validation));
    RETURN_IF_ERROR(EndEpoch(*run, validation));
  }
  // The trained weights whole for the caller (rank 0's go back to the launcher), until the next
  // fit.
  RETURN_IF_ERROR(strategy_.GatherParameters());
  parameters_whole_after_fit_ = true;
  RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnFitEnd(context); }));
  RETURN_IF_ERROR(run->profiler->Finish(
      strategy_, options_.default_root_dir,
      strategy_.group() != nullptr ? strategy_.group()->blocked_seconds() - run->blocked_at_start
                                   : 0.0,
      options_.enable_progress));
  FitResult result;
  result.checkpoint = std::filesystem::absolute(run->checkpoint).string();
  const bool csv =
      std::find(options_.loggers.begin(), options_.loggers.end(), "csv") != options_.loggers.end();
  result.metrics_csv =
      csv ? std::filesystem::absolute(options_.default_root_dir + "/metrics.csv").string() : "";
  result.epoch = run->state.epoch;
  result.global_step = run->state.global_step;
  result.metrics = last_metrics_;
  if (run->out_of_time) result.stopped_by = "max_time";
  if (run->signaled) result.stopped_by = SignalAbbrev(options_.checkpoint_on_signal);
  if (!run->stopped_by.empty()) result.stopped_by = run->stopped_by;
  ASSIGN_OR_RETURN(result.optimizer_state_bytes, OptimizerStateBytesPerRank(*run->optimizer));
  // Under full_shard, the rows the sharded optimizer steps are all a rank keeps of the parameters.
  const auto* sharded = dynamic_cast<const ShardedOptimizer*>(run->optimizer.get());
  int64_t parameter_bytes = 0;
  for (const at::Tensor& p : sharding_parameters() && sharded != nullptr
                                 ? sharded->StepGradientHolders()
                                 : module->parameters()) {
    parameter_bytes += static_cast<int64_t>(p.numel() * p.element_size());
  }
  ASSIGN_OR_RETURN(result.parameter_bytes, PerRank(parameter_bytes));
  result.full_shard_units = static_cast<int64_t>(strategy_.full_shard_units());
  if (TensorMemoryCounterInstalled()) {
    ASSIGN_OR_RETURN(result.peak_tensor_bytes, PerRank(PeakTensorBytes()));
  }
  ASSIGN_OR_RETURN(const ArrivalReport arrivals, Arrivals());
  result.straggler = arrivals.Since(run->arrivals_at_start);
  return result;
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> Trainer::MakeFitOptimizer(
    const OptimizerConfig& config, const std::vector<at::Tensor>& parameters) {
  OptimizerFactory make = [config, parameters] { return MakeOptimizer(config, parameters); };
  const ShardingStrategy sharding = strategy_.options().sharding_strategy;
  if (sharding != ShardingStrategy::kNoShard && strategy_.group() != nullptr) {
    // (The wrapped model's reducer checked the communication hook.)
    RETURN_IF_ERROR(
        CheckShardingStrategy(sharding, options_.zero_redundancy_optimizer, "allreduce"));
    if (strategy_.model() == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(ShardingStrategyName(sharding), "'s optimizer needs the wrapped model"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<ShardGradOpOptimizer> sharded,
                     ShardGradOpOptimizer::Create(std::move(make), *strategy_.model()));
    return sharded;
  }
  if (!options_.zero_redundancy_optimizer || strategy_.group() == nullptr) return make();
  if (strategy_.options().ddp_comm_hook == CommHookKind::kPostLocalSgd) {
    return ZeroRedundancyWithLocalSgdError();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> sharded,
                   ZeroRedundancyOptimizer::Create(std::move(make), strategy_.group()));
  return sharded;
}

absl::StatusOr<std::vector<int64_t>> Trainer::OptimizerStateBytesPerRank(
    const torch::optim::Optimizer& optimizer) {
  absl::StatusOr<int64_t> bytes = OptimizerStateBytes(optimizer);
  return PerRank(bytes.ok() ? *bytes : -1);
}

absl::StatusOr<std::vector<int64_t>> Trainer::PerRank(int64_t mine) {
  ProcessGroup* group = strategy_.group();
  if (group == nullptr) return std::vector<int64_t>{mine};
  std::vector<int64_t> everyone(group->world_size());
  RETURN_IF_ERROR(group->AllGather(&mine, 1, DType::kInt64, everyone.data()));
  return everyone;
}

absl::StatusOr<ArrivalReport> Trainer::Arrivals() {
  ProcessGroup* group = strategy_.group();
  if (group == nullptr) {
    ArrivalReport none;
    none.unmeasured = "no process group";
    return none;
  }
  ArrivalReport report = group->arrivals();
  if (group->backend() == Backend::kGloo && group->world_size() > 1) {
    // Every rank's time blocked in collectives (one small all-gather): where arrivals are not
    // timed, the rank blocked least is the one the others waited for.
    const double mine = group->blocked_seconds();
    std::vector<double> everyone(group->world_size());
    RETURN_IF_ERROR(group->AllGather(&mine, 1, DType::kFloat64, everyone.data()));
    report.ranks.resize(everyone.size());
    for (size_t r = 0; r < everyone.size(); ++r) report.ranks[r].blocked_seconds = everyone[r];
    report.blocked_known = true;
  }
  return report;
}

absl::Status Trainer::LogArrivals(FitRun& run) {
  ASSIGN_OR_RETURN(const ArrivalReport now, Arrivals());
  const ArrivalReport epoch = now.Since(run.arrivals_at_epoch);
  run.arrivals_at_epoch = now;
  const bool timed = epoch.measured() && epoch.collectives > 0;
  if (!timed && !epoch.blocked_known) return absl::OkStatus();
  const int64_t step = run.state.global_step;
  RETURN_IF_ERROR(WriteMetricRow(run.epoch, step, "straggler_rank", epoch.Straggler()));
  for (size_t r = 0; r < epoch.ranks.size(); ++r) {
    const RankArrivals& rank = epoch.ranks[r];
    if (timed) {
      RETURN_IF_ERROR(WriteMetricRow(run.epoch, step, absl::StrCat("rank", r, "_arrived_last"),
                                     static_cast<double>(rank.arrived_last) / epoch.collectives));
      RETURN_IF_ERROR(WriteMetricRow(
          run.epoch, step, absl::StrCat("rank", r, "_late_ms"),
          rank.arrived_last > 0 ? 1e3 * rank.late_seconds / rank.arrived_last : 0.0));
    }
    if (epoch.blocked_known) {
      RETURN_IF_ERROR(WriteMetricRow(run.epoch, step, absl::StrCat("rank", r, "_blocked_s"),
                                     rank.blocked_seconds));
    }
  }
  return absl::OkStatus();
}

// Rank 0's output directories and loggers, with the run's hyperparameters logged; nothing on the
// other ranks.
absl::Status Trainer::PrepareFitOutputs() {
  loggers_.clear();
  if (!strategy_.is_global_zero()) return absl::OkStatus();
  for (const std::string& dir :
       {options_.default_root_dir, options_.default_root_dir + "/checkpoints"}) {
    RETURN_IF_ERROR(PrepareOutputDirectory(dir));
  }
  ASSIGN_OR_RETURN(loggers_, MakeMetricLoggers(options_.loggers, options_.default_root_dir));
  if (options_.hyperparameters.empty()) return absl::OkStatus();
  for (const std::unique_ptr<MetricLogger>& logger : loggers_) {
    RETURN_IF_ERROR(logger->LogHyperparameters(options_.hyperparameters));
  }
  return absl::OkStatus();
}

// Restores options_.resume_from (or the in-memory commit, when it says so) into `run`: the module,
// the optimizer, where training stands, this rank's random generator and each callback's state.
absl::Status Trainer::ResumeFit(LightningModule& module, FitRun& run) {
  const int rank = strategy_.global_rank();
  TrainingState& state = run.state;
  InMemoryCommit* commit = options_.in_memory_commit.get();
  const bool from_commit = commit != nullptr && commit->resume;
  const std::string source = from_commit
                                 ? absl::StrCat("the in-memory commit of step ", commit->step)
                                 : options_.resume_from;
  if (from_commit) {
    RETURN_IF_ERROR(RestoreCommit(module, run));
  } else if (IsShardedCheckpoint(options_.resume_from)) {
    RETURN_IF_ERROR(ResumeSharded(module, run));
  } else {
    ASSIGN_OR_RETURN(std::string bytes, strategy_.LoadCheckpoint(options_.resume_from));
    // Under full_shard the weights are loaded whole, and each rank keeps its rows of them.
    if (absl::Status s = WithParametersWhole(
            strategy_,
            [&] { return RestoreCheckpoint(bytes, module, run.optimizer.get(), &state); });
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resume from ", source, ": ", s.message()));
    }
  }
  RETURN_IF_ERROR(CheckResumableOn(state, strategy_.world_size(), source, EpochsLimited(options_)));
  if (rank < static_cast<int>(state.cpu_rng_per_rank.size())) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(state.cpu_rng_per_rank[rank]);
  }
  for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
    const auto saved = state.callback_states.find(callback->name());
    if (saved == state.callback_states.end()) continue;  // a fresh start for it
    if (absl::Status s = callback->OnLoadCheckpoint(saved->second); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resume from ", source, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

// A sharded checkpoint (sharded_checkpoint.h): each rank reads the saved shards that hold its rows.
absl::Status Trainer::ResumeSharded(LightningModule& module, FitRun& run) {
  const std::string& path = options_.resume_from;
  auto* sharded = dynamic_cast<ShardGradOpOptimizer*>(run.optimizer.get());
  if (sharded == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resume from ", path,
        ": it is a sharded checkpoint (state_dict_type sharded), which resumes under "
        "sharding_strategy shard_grad_op or full_shard on more than one rank; `ddpspawn export "
        "--checkpoint ",
        path, "` writes its weights as one file, from which checkpoint= starts a new fit"));
  }
  absl::StatusOr<ShardedCheckpointLoad> loaded =
      LoadShardedCheckpoint(path, module.named_state(), *sharded);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("cannot resume from ", path, ": ", loaded.status().message()));
  }
  absl::StatusOr<TrainingState> state = ParseTrainingState(loaded->extra);
  if (!state.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume from ", path, ": ", state.status().message()));
  }
  run.state = *std::move(state);
  return absl::OkStatus();
}

// This rank's shard of `train` and the batches of an epoch it trains (limit_train_batches or
// overfit_batches), and how often it validates (val_check_interval).
absl::Status Trainer::PlanEpochs(const Dataset& train, FitRun& run) {
  const bool overfit = !options_.overfit_batches.is_zero();
  absl::StatusOr<DistributedSampler> sampler =
      DistributedSampler::Create(train.size(), strategy_.world_size(), strategy_.global_rank(),
                                 options_.shuffle && !overfit, options_.seed, options_.drop_last);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training data ", train.source, ": ", sampler.status().message()));
  }
  run.sampler = *std::move(sampler);
  // Resumed mid-epoch on another number of ranks than saved it: they deal the rest of the epoch.
  TrainingState& state = run.state;
  const int64_t saved_by =
      state.world_size > 0 ? state.world_size : static_cast<int64_t>(state.cpu_rng_per_rank.size());
  if (state.batch_in_epoch > 0 && saved_by > 0 && saved_by != strategy_.world_size()) {
    state.epoch_start = EpochPositionAfter(
        train.size(), state.epoch_start, static_cast<int>(saved_by), options_.drop_last,
        state.batch_in_epoch * static_cast<int64_t>(options_.batch_size));
    state.batch_in_epoch = 0;
  }
  const int64_t all_batches = BatchCount(run.sampler->num_samples(), options_.batch_size);
  ASSIGN_OR_RETURN(run.batches,
                   overfit ? options_.overfit_batches.Of(all_batches, "overfit_batches")
                           : options_.limit_train_batches.Of(all_batches, "limit_train_batches"));
  if (run.batches == 0) {
    return absl::InvalidArgumentError(
        "limit_train_batches=0 trains nothing; to only validate, call validate");
  }
  const BatchAmount& interval = options_.val_check_interval;
  if (interval.is_count() && (interval.count() < 1 || interval.count() > run.batches)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "val_check_interval=", interval.ToString(), " must be a count in [1, ", run.batches,
        "], the training batches of an epoch on each rank (or a fraction of them)"));
  }
  ASSIGN_OR_RETURN(run.val_every, interval.Of(run.batches, "val_check_interval"));
  run.whole_epoch_batches = run.batches;
  if (run.val_every == 0) {
    return absl::InvalidArgumentError(
        "val_check_interval=0 never validates; use "
        "limit_val_batches=0 to turn validation off");
  }
  return absl::OkStatus();
}

// Checks the options, prepares the output directories, makes the optimizer, restores a checkpoint
// to resume from, and shards the training set.
absl::StatusOr<std::unique_ptr<Trainer::FitRun>> Trainer::StartFit(
    const std::shared_ptr<LightningModule>& module, const Dataset& train) {
  RETURN_IF_ERROR(Prepare(module));
  if (parameters_whole_after_fit_) {  // the last fit's, for its caller; sharded again to train
    parameters_whole_after_fit_ = false;
    RETURN_IF_ERROR(strategy_.ReleaseParameters());
  }
  module->TakeLogged();  // what a step logged before fit (a check's trial step) is not fit's
  if (options_.accumulate_grad_batches < 1) {
    return absl::InvalidArgumentError("accumulate_grad_batches must be >= 1");
  }
  if (options_.max_epochs < 1 && options_.max_steps <= 0) {
    return absl::InvalidArgumentError("set max_epochs >= 1 or max_steps >= 1");
  }
  RETURN_IF_ERROR(PrepareFitOutputs());
  std::set<std::string> names;
  for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
    if (callback == nullptr) return absl::InvalidArgumentError("a callback is null");
    if (!names.insert(callback->name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("two callbacks are named '", callback->name(),
                                                     "'; their checkpoint states would collide"));
    }
  }
  auto run = std::make_unique<FitRun>(module, options_);
  run->checkpoint = LastCheckpointPath(options_);

  at::manual_seed(options_.seed + static_cast<uint64_t>(strategy_.global_rank()));
  run->config = module->ConfigureOptimizers();
  ASSIGN_OR_RETURN(run->optimizer, MakeFitOptimizer(run->config, module->parameters()));
  const bool resumes_commit =
      options_.in_memory_commit != nullptr && options_.in_memory_commit->resume;
  if (!options_.resume_from.empty() || resumes_commit) RETURN_IF_ERROR(ResumeFit(*module, *run));
  const TrainingState& state = run->state;
  strategy_.ContinueFrom(state.global_step);  // post-local SGD's counts
  RETURN_IF_ERROR(PlanEpochs(train, *run));
  run->max_epochs = options_.max_epochs >= 1 ? options_.max_epochs : INT64_MAX;
  run->bar = options_.enable_progress && strategy_.is_global_zero() && isatty(1);
  run->scaler = strategy_.options().precision_plugin->grad_scaler();
  if (run->scaler != nullptr) {
    run->scaler->Restore({state.grad_scale, state.grad_scale_growth_tracker});
  }
  auto* sharded = dynamic_cast<ShardedOptimizer*>(run->optimizer.get());
  if (sharding_parameters() && sharded != nullptr) {
    // full_shard's parameters are freed between steps: the non-finite watch reads each rank's rows.
    run->parameters = sharded->StepGradientHolders();
  } else {
    for (const at::Tensor& p : module->parameters()) {
      if (p.requires_grad()) run->parameters.push_back(p);
    }
  }
  run->deadline = absl::Now() + options_.max_time;  // infinite: never
  run->stop = options_.max_steps > 0 && state.global_step >= options_.max_steps;
  // A fresh fit's first commit holds its initial weights; a resumed one falls back to what it
  // resumed from until it commits.
  if (options_.in_memory_commit != nullptr && options_.resume_from.empty() && !resumes_commit) {
    RETURN_IF_ERROR(CommitInMemory(*run));
  }
  return run;
}

}  // namespace ddpspawn
