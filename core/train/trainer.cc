// The training loops (see trainer.h). What they use but do not own is beside
// them: optimizer_factory, stop_signal, checkpoint_connector, metric_sync and
// fit_result.
#include "core/train/trainer.h"

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
#include "core/ddp/zero_redundancy_optimizer.h"
#include "core/train/logged_metrics.h"
#include "core/train/metric_sync.h"
#include "core/train/sampler.h"
#include "core/train/stop_signal.h"
#include "core/util/output_dir.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// Samples [begin, end) of `indices`: from memory, or read from the program's
// own dataset on `workers` threads.
absl::StatusOr<Batch> MakeBatch(const Dataset& data, const std::vector<int64_t>& indices,
                                int64_t begin, int64_t end, int workers) {
  std::vector<int64_t> chosen(indices.begin() + begin, indices.begin() + end);
  if (data.samples != nullptr) {
    absl::StatusOr<Batch> batch = ReadSamples(*data.samples, chosen, workers);
    if (!batch.ok()) {
      return absl::Status(batch.status().code(),
                          absl::StrCat(data.source, ": ", batch.status().message()));
    }
    return batch;
  }
  at::Tensor index = at::tensor(chosen, at::kLong);
  return Batch{data.features.index_select(0, index), data.labels.index_select(0, index)};
}

// fast_dev_run's few batches of every loop, in one epoch, without the
// callbacks that write or stop.
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
  if (auto* sharded = dynamic_cast<ZeroRedundancyOptimizer*>(optimizer)) {
    RETURN_IF_ERROR(sharded->ConsolidateStateDict(0));  // rank 0 saves the unsharded state
  }
  std::string bytes;
  if (strategy_.is_global_zero()) {
    ASSIGN_OR_RETURN(std::string serialized, SerializeCheckpoint(module, optimizer, state));
    bytes = std::move(serialized);
  }
  return strategy_.SaveCheckpoint(bytes, path);
}

absl::Status Trainer::CallHooks(const std::function<absl::Status(Callback&)>& hook) {
  for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
    RETURN_IF_ERROR(hook(*callback));
  }
  return absl::OkStatus();
}

// One Fit() in progress: what its steps share.
struct Trainer::FitRun {
  FitRun(std::shared_ptr<LightningModule> trained, const TrainerOptions& options)
      : module(std::move(trained)), watch(options.allow_non_finite_loss, options.resume_from) {}

  std::shared_ptr<LightningModule> module;
  OptimizerConfig config;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  TrainingState state;
  std::optional<DistributedSampler> sampler;
  std::string checkpoint;  // last.ckpt
  int64_t batches = 0;     // per epoch, in this rank's shard
  int64_t max_epochs = 0;
  bool bar = false;                    // rank 0 redraws a progress line on a terminal
  GradScaler* scaler = nullptr;        // 16-mixed's loss scaler, or null
  std::vector<at::Tensor> parameters;  // those that take gradients
  FiniteWatch watch;
  absl::Time deadline = absl::InfiniteFuture();  // max_time's
  bool out_of_time = false;
  bool signaled = false;  // checkpoint_on_signal arrived on some rank
  bool stop = false;
  // A callback's RequestStop(): FitResult::stopped_by and the epoch line's end.
  std::string stopped_by, stop_why;
  bool validates = false;  // given validation data, checked every n > 0 epochs
  int64_t val_every = 0;   // validate after every this many batches (val_check_interval)
  BatchAmount val_limit = BatchAmount::All();  // of each validation's batches
  bool validated = false;                      // in the epoch in progress
  FitContext* context = nullptr;               // FitAndReport's, while it runs
  // The epoch in progress.
  int64_t epoch = 0;
  absl::Time epoch_start;
  double epoch_loss = 0, window_loss = 0;  // the window: since the last logged step
  int64_t epoch_batches = 0, window_batches = 0;
  LoggedSums epoch_logged, window_logged;  // what the module's steps logged
  std::unique_ptr<FitProfiler> profiler;
  double blocked_at_start = 0;  // the group's time blocked in collectives when fit began
  // The group's arrivals when fit and the epoch in progress began.
  ArrivalReport arrivals_at_start, arrivals_at_epoch;

  // `state` as a checkpoint keeps it: mid-epoch, with this rank's loss of the
  // epoch so far (Trainer::SaveCheckpoint gathers every rank's).
  TrainingState ToSave() const {
    TrainingState saved = state;
    if (state.batch_in_epoch > 0 && epoch_batches > 0) {
      saved.epoch_loss_sum_per_rank = {epoch_loss};
      saved.epoch_loss_batches = epoch_batches;
    }
    return saved;
  }
};

// The callbacks' view of a FitRun (callback.h).
class Trainer::FitContext : public CallbackContext {
 public:
  FitContext(Trainer& trainer, FitRun& run) : trainer_(trainer), run_(run) {}

  int global_rank() const override { return trainer_.strategy_.global_rank(); }
  int world_size() const override { return trainer_.strategy_.world_size(); }
  int64_t epoch() const override { return run_.epoch; }
  int64_t global_step() const override { return run_.state.global_step; }
  const std::map<std::string, double>& metrics() const override { return trainer_.last_metrics_; }
  const std::map<std::string, double>& epoch_metrics() const override {
    return trainer_.epoch_metrics_;
  }
  bool validates() const override { return run_.validates; }
  bool validated_this_epoch() const override { return run_.validated; }
  double learning_rate() const override {
    return run_.optimizer->param_groups().front().options().get_lr();
  }
  std::string optimizer_name() const override {
    return run_.config.custom ? run_.config.custom_name
                              : std::string(OptimizerClassName(run_.config.optimizer));
  }
  double base_learning_rate() const override { return run_.config.lr; }
  int64_t total_steps() const override {
    const int64_t per_epoch = (run_.batches + trainer_.options_.accumulate_grad_batches - 1) /
                              trainer_.options_.accumulate_grad_batches;
    const int64_t by_epochs =
        trainer_.options_.max_epochs >= 1 ? trainer_.options_.max_epochs * per_epoch : INT64_MAX;
    return trainer_.options_.max_steps > 0 ? std::min(trainer_.options_.max_steps, by_epochs)
                                           : by_epochs;
  }
  int64_t total_epochs() const override {
    return std::max<int64_t>(trainer_.options_.max_epochs, 0);
  }
  void set_learning_rate(double lr) override {
    for (auto& group : run_.optimizer->param_groups()) group.options().set_lr(lr);
  }
  std::string checkpoint_dir() const override {
    return trainer_.options_.default_root_dir + "/checkpoints";
  }
  absl::Status Log(const std::string& name, double value) override {
    return trainer_.Log(run_.epoch, run_.state.global_step, name, value);
  }
  absl::Status SaveCheckpoint(const std::string& path) override {
    return trainer_.SaveCheckpoint(*run_.module, run_.optimizer.get(), run_.ToSave(), path);
  }
  absl::Status RemoveCheckpoint(const std::string& path) override {
    return trainer_.strategy_.RemoveCheckpoint(path);
  }
  absl::StatusOr<bool> AnyRank(bool mine) override {
    ASSIGN_OR_RETURN(
        at::Tensor any,
        trainer_.strategy_.Reduce(at::tensor({mine ? 1.0 : 0.0}, at::kDouble), ReduceOp::kMax));
    return any.to(at::kCPU).item<double>() > 0;
  }
  void RequestStop(const std::string& by, const std::string& why) override {
    run_.stop = true;
    if (run_.stopped_by.empty()) {
      run_.stopped_by = by;
      run_.stop_why = why;
    }
  }

 private:
  Trainer& trainer_;
  FitRun& run_;
};

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
  ASSIGN_OR_RETURN(std::unique_ptr<FitRun> run, StartFit(module, train));
  // overfit_batches validates on the batches it trains on (the first ones of
  // each rank's unshuffled shard; ForEachShardBatch's shards are the same).
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
    // Lightning's sanity check: a few validation batches before training;
    // their metrics are not logged.
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
  ASSIGN_OR_RETURN(const ArrivalReport arrivals, Arrivals());
  result.straggler = arrivals.Since(run->arrivals_at_start);
  return result;
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> Trainer::MakeFitOptimizer(
    const OptimizerConfig& config, const std::vector<at::Tensor>& parameters) {
  if (!options_.zero_redundancy_optimizer || strategy_.group() == nullptr) {
    return MakeOptimizer(config, parameters);
  }
  if (strategy_.options().ddp_comm_hook == CommHookKind::kPostLocalSgd) {
    return ZeroRedundancyWithLocalSgdError();
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<ZeroRedundancyOptimizer> sharded,
      ZeroRedundancyOptimizer::Create(
          [config, parameters] { return MakeOptimizer(config, parameters); }, strategy_.group()));
  return sharded;
}

absl::StatusOr<std::vector<int64_t>> Trainer::OptimizerStateBytesPerRank(
    const torch::optim::Optimizer& optimizer) {
  absl::StatusOr<int64_t> bytes = OptimizerStateBytes(optimizer);
  const int64_t mine = bytes.ok() ? *bytes : -1;
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
    // Every rank's time blocked in collectives (one small all-gather): where
    // arrivals are not timed, the rank blocked least is the one the others
    // waited for.
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

// Checks the options, prepares the output directories, makes the optimizer,
// restores a checkpoint to resume from, and shards the training set.
absl::StatusOr<std::unique_ptr<Trainer::FitRun>> Trainer::StartFit(
    const std::shared_ptr<LightningModule>& module, const Dataset& train) {
  RETURN_IF_ERROR(Prepare(module));
  module->TakeLogged();  // what a step logged before fit (a check's trial step) is not fit's
  const int rank = strategy_.global_rank(), world = strategy_.world_size();
  if (options_.accumulate_grad_batches < 1) {
    return absl::InvalidArgumentError("accumulate_grad_batches must be >= 1");
  }
  if (options_.max_epochs < 1 && options_.max_steps <= 0) {
    return absl::InvalidArgumentError("set max_epochs >= 1 or max_steps >= 1");
  }
  loggers_.clear();
  if (strategy_.is_global_zero()) {  // rank 0 writes the metrics and the checkpoints
    for (const std::string& dir :
         {options_.default_root_dir, options_.default_root_dir + "/checkpoints"}) {
      RETURN_IF_ERROR(PrepareOutputDirectory(dir));
    }
    ASSIGN_OR_RETURN(loggers_, MakeMetricLoggers(options_.loggers, options_.default_root_dir));
    if (!options_.hyperparameters.empty()) {
      for (const std::unique_ptr<MetricLogger>& logger : loggers_) {
        RETURN_IF_ERROR(logger->LogHyperparameters(options_.hyperparameters));
      }
    }
  }
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

  at::manual_seed(options_.seed + static_cast<uint64_t>(rank));
  run->config = module->ConfigureOptimizers();
  ASSIGN_OR_RETURN(run->optimizer, MakeFitOptimizer(run->config, module->parameters()));
  TrainingState& state = run->state;
  if (!options_.resume_from.empty()) {
    ASSIGN_OR_RETURN(std::string bytes, strategy_.LoadCheckpoint(options_.resume_from));
    if (absl::Status s = RestoreCheckpoint(bytes, *module, run->optimizer.get(), &state); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resume from ", options_.resume_from, ": ", s.message()));
    }
    RETURN_IF_ERROR(CheckResumableOn(state, world, options_.resume_from));
    if (rank < static_cast<int>(state.cpu_rng_per_rank.size())) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(state.cpu_rng_per_rank[rank]);
    }
    for (const std::shared_ptr<Callback>& callback : options_.callbacks) {
      const auto saved = state.callback_states.find(callback->name());
      if (saved == state.callback_states.end()) continue;  // a fresh start for it
      if (absl::Status s = callback->OnLoadCheckpoint(saved->second); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot resume from ", options_.resume_from, ": ", s.message()));
      }
    }
  }
  strategy_.ContinueFrom(state.global_step);  // post-local SGD's counts
  const bool overfit = !options_.overfit_batches.is_zero();
  absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(
      train.size(), world, rank, options_.shuffle && !overfit, options_.seed, options_.drop_last);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training data ", train.source, ": ", sampler.status().message()));
  }
  run->sampler = *std::move(sampler);
  const int64_t all_batches = BatchCount(run->sampler->num_samples(), options_.batch_size);
  ASSIGN_OR_RETURN(run->batches,
                   overfit ? options_.overfit_batches.Of(all_batches, "overfit_batches")
                           : options_.limit_train_batches.Of(all_batches, "limit_train_batches"));
  if (run->batches == 0) {
    return absl::InvalidArgumentError(
        "limit_train_batches=0 trains nothing; to only validate, call validate");
  }
  const BatchAmount& interval = options_.val_check_interval;
  if (interval.is_count() && (interval.count() < 1 || interval.count() > run->batches)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "val_check_interval=", interval.ToString(), " must be a count in [1, ", run->batches,
        "], the training batches of an epoch on each rank (or a fraction of them)"));
  }
  ASSIGN_OR_RETURN(run->val_every, interval.Of(run->batches, "val_check_interval"));
  if (run->val_every == 0) {
    return absl::InvalidArgumentError(
        "val_check_interval=0 never validates; use "
        "limit_val_batches=0 to turn validation off");
  }
  run->max_epochs = options_.max_epochs >= 1 ? options_.max_epochs : INT64_MAX;
  run->bar = options_.enable_progress && strategy_.is_global_zero() && isatty(1);
  run->scaler = strategy_.options().precision_plugin->grad_scaler();
  if (run->scaler != nullptr) {
    run->scaler->Restore({state.grad_scale, state.grad_scale_growth_tracker});
  }
  for (const at::Tensor& p : module->parameters()) {
    if (p.requires_grad()) run->parameters.push_back(p);
  }
  run->deadline = absl::Now() + options_.max_time;  // infinite: never
  run->stop = options_.max_steps > 0 && state.global_step >= options_.max_steps;
  return run;
}

bool Trainer::ValidatesThisEpoch(const FitRun& run) const {
  return run.validates && (run.epoch + 1) % options_.check_val_every_n_epoch == 0;
}

absl::StatusOr<std::map<std::string, double>> Trainer::ValidateInFit(FitRun& run,
                                                                     const Dataset& validation) {
  RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnValidationStart(*run.context); }));
  absl::StatusOr<std::map<std::string, double>> evaluated;
  {
    FitProfiler::Timed timed = run.profiler->Time("validation");
    evaluated = Evaluate(run.module, validation, false, run.val_limit, "limit_val_batches");
  }
  ASSIGN_OR_RETURN(auto metrics, std::move(evaluated));
  for (const auto& [name, value] : metrics) {
    RETURN_IF_ERROR(Log(run.epoch, run.state.global_step, name, value));
  }
  run.validated = true;
  run.module->SetTraining(true);
  RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnValidationEnd(*run.context); }));
  return metrics;
}

// The rest of epoch run.state.epoch: a forward and backward pass per batch,
// an optimizer step every accumulate_grad_batches, and val_check_interval's
// validations within it.
absl::Status Trainer::TrainEpoch(FitRun& run, const Dataset& train, const Dataset* validation) {
  const int64_t epoch = run.epoch = run.state.epoch;
  run.epoch_start = absl::Now();
  run.epoch_loss = run.window_loss = 0;
  run.epoch_batches = run.window_batches = 0;
  run.epoch_logged.Clear();
  run.window_logged.Clear();
  if (run.state.batch_in_epoch > 0 && run.state.epoch_loss_batches > 0) {
    // Resumed mid-epoch: the epoch's losses before the checkpoint count too.
    // Another number of ranks than saved them: each takes their mean (the
    // epoch's mean over ranks stays the same).
    const std::vector<double>& sums = run.state.epoch_loss_sum_per_rank;
    const int rank = strategy_.global_rank();
    run.epoch_loss = static_cast<int>(sums.size()) == strategy_.world_size()
                         ? sums[rank]
                         : std::accumulate(sums.begin(), sums.end(), 0.0) /
                               static_cast<double>(std::max<size_t>(sums.size(), 1));
    run.epoch_batches = run.state.epoch_loss_batches;
  }
  run.state.epoch_loss_sum_per_rank.clear();
  run.state.epoch_loss_batches = 0;
  if (run.config.step_lr_every > 0) {
    const int64_t decays = epoch / run.config.step_lr_every;  // StepLR: whole periods only
    const double lr =
        run.config.lr * std::pow(run.config.step_lr_gamma, static_cast<double>(decays));
    for (auto& group : run.optimizer->param_groups()) group.options().set_lr(lr);
  }
  epoch_metrics_.clear();
  run.validated = false;
  RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnTrainEpochStart(*run.context); }));
  run.sampler->set_epoch(epoch);
  const std::vector<int64_t> indices = run.sampler->Indices();
  run.module->SetTraining(true);
  const int accumulate = options_.accumulate_grad_batches;
  for (int64_t b = run.state.batch_in_epoch; b < run.batches; ++b) {
    ASSIGN_OR_RETURN(Batch batch,
                     MakeBatch(train, indices, b * options_.batch_size,
                               BatchEnd(b, options_.batch_size, run.sampler->num_samples()),
                               options_.num_workers));
    const bool step_now = (b + 1) % accumulate == 0 || b + 1 == run.batches;
    RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnTrainBatchStart(*run.context, b); }));
    absl::StatusOr<at::Tensor> loss;
    {
      FitProfiler::Timed timed = run.profiler->Time("training_step");
      loss = strategy_.TrainingStep(batch, b);
    }
    RETURN_IF_ERROR(loss.status());
    const at::Tensor share = *loss / static_cast<double>(accumulate);
    {
      FitProfiler::Timed timed = run.profiler->Time("backward");
      if (step_now) {
        RETURN_IF_ERROR(strategy_.Backward(share));
      } else {
        DistributedDataParallel::NoSync no_sync = strategy_.model()->no_sync();
        RETURN_IF_ERROR(strategy_.Backward(share));
      }
    }
    for (const LoggedValue& logged : run.module->TakeLogged()) {
      RETURN_IF_ERROR(run.window_logged.Add(logged));
      RETURN_IF_ERROR(run.epoch_logged.Add(logged));
    }
    const double value = loss->item<double>();
    run.watch.See(value, epoch, run.state.global_step + 1);
    run.epoch_loss += value;
    run.window_loss += value;
    ++run.epoch_batches;
    ++run.window_batches;
    if (step_now) {
      {
        FitProfiler::Timed timed = run.profiler->Time("optimizer_step");
        RETURN_IF_ERROR(OptimizerStep(run));
      }
      run.state.batch_in_epoch = b + 1;
      ASSIGN_OR_RETURN(const bool done, AfterOptimizerStep(run, b, value));
      run.stop = run.stop || done;
    }
    RETURN_IF_ERROR(
        CallHooks([&](Callback& c) { return c.OnTrainBatchEnd(*run.context, b, step_now); }));
    // val_check_interval's validations within the epoch (the one at its end
    // runs in EndEpoch, after the epoch's loss).
    if (!run.stop && (b + 1) % run.val_every == 0 && b + 1 < run.batches &&
        ValidatesThisEpoch(run)) {
      RETURN_IF_ERROR(ValidateInFit(run, *validation).status());
    }
    // Between optimizer steps only: a stop asked for within an accumulation
    // takes effect at its step.
    if (run.stop && step_now) break;
  }
  return absl::OkStatus();
}

absl::Status Trainer::OptimizerStep(FitRun& run) {
  // 16-mixed: the strategy skips, on every rank, a step whose averaged
  // gradients hold an inf or a NaN, and shrinks the scale. Clipping sees the
  // unscaled gradients; a skipped step still counts, as in Lightning.
  const absl::Status stepped =
      strategy_
          .OptimizerStep(*run.optimizer,
                         [&] {
                           if (options_.gradient_clip_val <= 0) return;
                           if (options_.gradient_clip_algorithm == GradientClipAlgorithm::kValue) {
                             c10::NoGradGuard no_grad;
                             for (const at::Tensor& p : run.parameters) {
                               if (p.grad().defined())
                                 p.grad().clamp_(-options_.gradient_clip_val,
                                                 options_.gradient_clip_val);
                             }
                           } else {
                             ClipGradNorm(run.parameters, options_.gradient_clip_val);
                           }
                         })
          .status();
  RETURN_IF_ERROR(stepped);
  if (run.scaler != nullptr) {
    run.state.grad_scale = run.scaler->state().scale;
    run.state.grad_scale_growth_tracker = run.scaler->state().growth_tracker;
  }
  run.optimizer->zero_grad();
  ++run.state.global_step;
  return absl::OkStatus();
}

// After the optimizer step that ended batch `batch` (whose loss was `loss`):
// logs the loss, writes a checkpoint, redraws the progress line, as the
// options say; true when fit must stop (max_steps, max_time or a signal).
absl::StatusOr<bool> Trainer::AfterOptimizerStep(FitRun& run, int64_t batch, double loss) {
  TrainingState& state = run.state;
  if (options_.log_every_n_steps > 0 && state.global_step % options_.log_every_n_steps == 0) {
    ASSIGN_OR_RETURN(FiniteWatch::Reduced reduced,
                     run.watch.Reduce(strategy_, run.window_loss / run.window_batches, nullptr,
                                      run.epoch, state.global_step, run.window_logged.Riders()));
    RETURN_IF_ERROR(Log(run.epoch, state.global_step, "train_loss", reduced.loss));
    ASSIGN_OR_RETURN(auto logged, run.window_logged.Reduce(strategy_, reduced.riders));
    for (const auto& [name, value] : logged) {
      RETURN_IF_ERROR(Log(run.epoch, state.global_step, name, value));
    }
    run.window_logged.Clear();
    run.window_loss = 0;
    run.window_batches = 0;
  }
  if (options_.checkpoint_every_n_steps > 0 && batch + 1 < run.batches &&
      state.global_step % options_.checkpoint_every_n_steps == 0) {
    // Within the epoch (its end writes one anyway): finite weights only.
    RETURN_IF_ERROR(
        run.watch.Reduce(strategy_, 0.0, &run.parameters, run.epoch, state.global_step).status());
    RETURN_IF_ERROR(SaveCheckpoint(*run.module, run.optimizer.get(), run.ToSave(), run.checkpoint));
    run.watch.Saved(std::filesystem::absolute(run.checkpoint).string());
  }
  if (run.bar) {
    std::printf("\repoch %lld [%lld/%lld] loss %.4f", static_cast<long long>(run.epoch) + 1,
                static_cast<long long>(batch) + 1, static_cast<long long>(run.batches), loss);
    std::fflush(stdout);
  }
  if (options_.max_steps > 0 && state.global_step >= options_.max_steps) return true;
  if (options_.max_time != absl::InfiniteDuration() || options_.checkpoint_on_signal != 0) {
    ASSIGN_OR_RETURN(StopRequest request, StopRequestedOnAnyRank(strategy_, run.deadline));
    if (request.signaled || request.out_of_time) {
      run.signaled = request.signaled;
      run.out_of_time = !run.signaled;
      return true;
    }
  }
  return false;
}

// After the epoch's batches (all of them, or up to a stop): the epoch's loss,
// validation when due, the checkpoint, and the epoch's line.
absl::Status Trainer::EndEpoch(FitRun& run, const Dataset* validation) {
  TrainingState& state = run.state;
  const int64_t epoch = run.epoch;
  const bool epoch_done = state.batch_in_epoch >= run.batches;
  if (epoch_done) {
    state.epoch = epoch + 1;
    state.batch_in_epoch = 0;
  }
  std::string line =
      absl::StrFormat("epoch %d/%d step %d", epoch + 1, options_.max_epochs, state.global_step);
  if (run.epoch_batches > 0) {
    // Before validation and the checkpoint: the weights too.
    ASSIGN_OR_RETURN(
        FiniteWatch::Reduced reduced,
        run.watch.Reduce(strategy_, run.epoch_loss / run.epoch_batches, &run.parameters, epoch,
                         state.global_step, run.epoch_logged.Riders()));
    const double mean = reduced.loss;
    RETURN_IF_ERROR(Log(epoch, state.global_step, "train_loss_epoch", mean));
    absl::StrAppendFormat(&line, " train_loss %.4f", mean);
    ASSIGN_OR_RETURN(auto logged, run.epoch_logged.Reduce(strategy_, reduced.riders));
    for (const auto& [name, value] : logged) {
      RETURN_IF_ERROR(Log(epoch, state.global_step, absl::StrCat(name, "_epoch"), value));
      absl::StrAppendFormat(&line, " %s %.4f", name, value);
    }
    RETURN_IF_ERROR(LogArrivals(run));
  }
  if (epoch_done && ValidatesThisEpoch(run) && run.batches % run.val_every == 0) {
    ASSIGN_OR_RETURN(auto metrics, ValidateInFit(run, *validation));
    for (const auto& [name, value] : metrics) absl::StrAppendFormat(&line, " %s %.4f", name, value);
  }
  if (epoch_done) {
    RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnTrainEpochEnd(*run.context); }));
  }
  RETURN_IF_ERROR(SaveCheckpoint(*run.module, run.optimizer.get(), run.ToSave(), run.checkpoint));
  run.watch.Saved(std::filesystem::absolute(run.checkpoint).string());
  if (options_.enable_progress && strategy_.is_global_zero()) {
    std::string stopped;
    if (run.out_of_time) {
      stopped = absl::StrCat("; stopped: max_time (", absl::FormatDuration(options_.max_time),
                             ") reached");
    } else if (run.signaled) {
      stopped =
          absl::StrCat("; stopped: ", SignalAbbrev(options_.checkpoint_on_signal), " received");
    } else if (!run.stop_why.empty()) {
      stopped = absl::StrCat("; stopped: ", run.stop_why);
    }
    std::printf("%s%s (%.2f s)%s\n", run.bar ? "\r" : "", line.c_str(),
                absl::ToDoubleSeconds(absl::Now() - run.epoch_start), stopped.c_str());
    std::fflush(stdout);
  } else if (!run.stop_why.empty() && strategy_.is_global_zero()) {
    // Without the epoch lines, a callback's stop is still said once.
    std::fprintf(stderr, "ddpspawn: fit stopped after epoch %lld: %s\n",
                 static_cast<long long>(epoch) + 1, run.stop_why.c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> Trainer::ForEachShardBatch(
    LightningModule& module, const Dataset& data, bool exactly_once, const BatchAmount& limit,
    absl::string_view option,
    const std::function<absl::Status(const Batch&, int64_t, bool)>& step) {
  const int world = strategy_.world_size(), rank = strategy_.global_rank();
  absl::StatusOr<DistributedSampler> sampler =
      DistributedSampler::Create(data.size(), world, rank,
                                 /*shuffle=*/false, 0, /*drop_last=*/false);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data ", data.source, ": ", sampler.status().message()));
  }
  ASSIGN_OR_RETURN(const int64_t limited,
                   limit.Of(BatchCount(sampler->num_samples(), options_.batch_size), option));
  if (limited == 0) {
    return absl::InvalidArgumentError(absl::StrCat(option, "=0 runs no batch"));
  }
  const int64_t cap = limited * options_.batch_size;  // samples
  module.SetTraining(false);
  std::vector<int64_t> indices = sampler->Indices();
  bool counted = true;
  if (exactly_once) {
    // Without shuffling, rank r's k-th sample is position r + k * world of the
    // padded order, which repeats a sample from position data.size() on.
    const int64_t own =
        std::min<int64_t>(cap, rank < data.size() ? (data.size() - rank + world - 1) / world : 0);
    indices.resize(static_cast<size_t>(std::max<int64_t>(own, 1)));
    counted = own > 0;
  } else {
    indices.resize(static_cast<size_t>(std::min<int64_t>(cap, sampler->num_samples())));
  }
  const int64_t samples = static_cast<int64_t>(indices.size());
  const int64_t batches = BatchCount(samples, options_.batch_size);
  for (int64_t b = 0; b < batches; ++b) {
    ASSIGN_OR_RETURN(Batch batch,
                     MakeBatch(data, indices, b * options_.batch_size,
                               BatchEnd(b, options_.batch_size, samples), options_.num_workers));
    RETURN_IF_ERROR(step(batch, b, counted));
  }
  return indices;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Evaluate(
    const std::shared_ptr<LightningModule>& module, const Dataset& data, bool test,
    const BatchAmount& limit, absl::string_view option) {
  std::map<std::string, double> sums;
  double samples = 0;
  absl::StatusOr<std::vector<int64_t>> done = ForEachShardBatch(
      *module, data, /*exactly_once=*/true, limit, option,
      [&](const Batch& batch, int64_t b, bool counted) -> absl::Status {
        absl::StatusOr<StepMetrics> metrics =
            test ? strategy_.TestStep(batch, b) : strategy_.ValidationStep(batch, b);
        if (!metrics.ok()) return metrics.status();
        // An uncounted batch only names the metrics (its value may be anything).
        const double size = static_cast<double>(batch[0].size(0));
        for (const auto& [name, value] : *metrics) {
          sums[name] += counted ? value.item<double>() * size : 0.0;
        }
        if (counted) samples += size;
        return absl::OkStatus();
      });
  if (!done.ok()) return done.status();
  RETURN_IF_ERROR(AgreeOnMetricNames(strategy_, sums, test ? "test_step" : "validation_step"));
  // Weighted by samples, summed over the ranks (the names agree).
  std::vector<double> flat;
  flat.reserve(sums.size() + 1);
  for (const auto& [name, sum] : sums) flat.push_back(sum);
  flat.push_back(samples);
  ASSIGN_OR_RETURN(at::Tensor total,
                   strategy_.Reduce(at::tensor(flat, at::kDouble), ReduceOp::kSum));
  std::map<std::string, double> means;
  size_t i = 0;
  const double count = total[total.size(0) - 1].item<double>();
  for (const auto& [name, sum] : sums) means[name] = total[i++].item<double>() / count;
  return means;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Validate(
    const std::shared_ptr<LightningModule>& module, const Dataset& data) {
  RETURN_IF_ERROR(Prepare(module));
  return Evaluate(module, data, false, options_.limit_val_batches, "limit_val_batches");
}

absl::StatusOr<std::map<std::string, double>> Trainer::Test(
    const std::shared_ptr<LightningModule>& module, const Dataset& data) {
  RETURN_IF_ERROR(Prepare(module));
  return Evaluate(module, data, true, options_.limit_test_batches, "limit_test_batches");
}

absl::StatusOr<at::Tensor> Trainer::Predict(const std::shared_ptr<LightningModule>& module,
                                            const Dataset& data) {
  RETURN_IF_ERROR(Prepare(module));
  std::vector<at::Tensor> outputs;
  absl::StatusOr<std::vector<int64_t>> indices = ForEachShardBatch(
      *module, data, /*exactly_once=*/false, options_.limit_predict_batches,
      "limit_predict_batches", [&](const Batch& batch, int64_t b, bool) -> absl::Status {
        ASSIGN_OR_RETURN(at::Tensor out, strategy_.PredictStep(batch, b));
        outputs.push_back(out.detach().cpu().contiguous());
        return absl::OkStatus();
      });
  if (!indices.ok()) return indices.status();
  ASSIGN_OR_RETURN(at::Tensor all, strategy_.AllGather(at::cat(outputs)));
  ASSIGN_OR_RETURN(at::Tensor all_indices, strategy_.AllGather(at::tensor(*indices, at::kLong)));
  if (!strategy_.is_global_zero()) return at::Tensor();
  // Scatter back into dataset order; padding repeats a sample with the same
  // prediction. limit_predict_batches keeps each rank's first batches, which
  // together are the dataset's first samples (the shards are strided).
  at::Tensor flat = all.flatten(0, 1);
  std::vector<int64_t> shape = flat.sizes().vec();
  shape[0] = std::min<int64_t>(data.size(), all_indices.max().item<int64_t>() + 1);
  at::Tensor ordered = at::empty(shape, flat.options());
  ordered.index_copy_(0, all_indices.flatten(), flat);
  return ordered;
}

}  // namespace ddpspawn
