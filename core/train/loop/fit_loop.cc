// The Trainer's training loop (see trainer.h): a fit's epochs, batch by batch, its optimizer steps,
// and the validations and checkpoints within and after each epoch. trainer.cc starts and ends the
// fit.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/ddp/gradient_clipping.h"
#include "core/ddp/sharded_optimizer.h"
#include "core/launch/worker_channel.h"
#include "core/train/data/sampler.h"
#include "core/train/loop/fit_run.h"
#include "core/train/loop/logged_metrics.h"
#include "core/train/loop/metric_sync.h"
#include "core/train/loop/stop_signal.h"
#include "core/train/loop/trainer.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

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

// The rest of epoch run.state.epoch: a forward and backward pass per batch, an optimizer step every
// accumulate_grad_batches, and val_check_interval's validations within it. An epoch's start: its
// counters (with the losses before a mid-epoch checkpoint), StepLR's rate, and the callbacks'
// OnTrainEpochStart.
absl::Status Trainer::BeginEpoch(FitRun& run) {
  const int64_t epoch = run.epoch = run.state.epoch;
  run.epoch_start = absl::Now();
  run.epoch_loss = run.window_loss = 0;
  run.epoch_batches = run.window_batches = 0;
  run.epoch_logged.Clear();
  run.window_logged.Clear();
  // The epoch's batches: fewer in an epoch resumed on another number of ranks, which deal only the
  // rest of its order (PlanEpochs).
  RETURN_IF_ERROR(run.sampler->set_start(run.state.epoch_start));
  run.batches = run.state.epoch_start > 0
                    ? BatchCount(run.sampler->num_samples(), options_.batch_size)
                    : run.whole_epoch_batches;
  if ((run.state.batch_in_epoch > 0 || run.state.epoch_start > 0) &&
      run.state.epoch_loss_batches > 0) {
    // Resumed mid-epoch: the epoch's losses before the checkpoint count too. Another number of
    // ranks than saved them: each takes their mean (the epoch's mean over ranks stays the same).
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
  return absl::OkStatus();
}

// One batch's training step and backward (under no_sync unless `step_now`), its logged values
// gathered; returns the batch's loss.
absl::StatusOr<double> Trainer::TrainOnBatch(FitRun& run, const Batch& batch, int64_t b,
                                             bool step_now) {
  const int accumulate = options_.accumulate_grad_batches;
  const int64_t epoch = run.epoch;
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
  return value;
}

absl::Status Trainer::TrainEpoch(FitRun& run, const Dataset& train, const Dataset* validation) {
  RETURN_IF_ERROR(BeginEpoch(run));
  const int64_t epoch = run.epoch;
  run.sampler->set_epoch(epoch);
  const std::vector<int64_t> indices = run.sampler->Indices();
  run.module->SetTraining(true);
  const int accumulate = options_.accumulate_grad_batches;
  for (int64_t b = run.state.batch_in_epoch; b < run.batches; ++b) {
    ASSIGN_OR_RETURN(Batch batch,
                     ReadBatch(train, indices, b * options_.batch_size,
                               BatchEnd(b, options_.batch_size, run.sampler->num_samples()),
                               options_.num_workers));
    const bool step_now = (b + 1) % accumulate == 0 || b + 1 == run.batches;
    RETURN_IF_ERROR(CallHooks([&](Callback& c) { return c.OnTrainBatchStart(*run.context, b); }));
    ASSIGN_OR_RETURN(const double value, TrainOnBatch(run, batch, b, step_now));
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
    // val_check_interval's validations within the epoch (the one at its end runs in EndEpoch, after
    // the epoch's loss).
    if (!run.stop && (b + 1) % run.val_every == 0 && b + 1 < run.batches &&
        ValidatesThisEpoch(run)) {
      RETURN_IF_ERROR(ValidateInFit(run, *validation).status());
    }
    // Between optimizer steps only: a stop asked for within an accumulation takes effect at its
    // step.
    if (run.stop && step_now) break;
  }
  return absl::OkStatus();
}

absl::Status Trainer::OptimizerStep(FitRun& run) {
  // 16-mixed: the strategy skips, on every rank, a step whose averaged gradients hold an inf or a
  // NaN, and shrinks the scale. Clipping sees the unscaled gradients; a skipped step still counts,
  // as in Lightning. A sharded optimizer's gradients are what it holds (ZeRO-2: this rank's rows,
  // whose global norm sums over every rank's).
  auto* sharded = dynamic_cast<ShardedOptimizer*>(run.optimizer.get());
  const std::vector<at::Tensor> holders =
      sharded != nullptr ? sharded->StepGradientHolders() : run.parameters;
  ProcessGroup* shard_group = sharded != nullptr ? sharded->gradient_shard_group() : nullptr;
  absl::Status clipped = absl::OkStatus();
  const absl::Status stepped =
      strategy_
          .OptimizerStep(
              *run.optimizer,
              [&] {
                if (options_.gradient_clip_val <= 0) return;
                if (options_.gradient_clip_algorithm == GradientClipAlgorithm::kValue) {
                  clipped = ClipParameterGradientValue(holders, options_.gradient_clip_val);
                } else {
                  clipped = ClipParameterGradientNorm(holders, options_.gradient_clip_val,
                                                      /*norm_type=*/2.0, "parameter", shard_group)
                                .status();
                }
              })
          .status();
  RETURN_IF_ERROR(stepped);
  RETURN_IF_ERROR(clipped);
  if (run.scaler != nullptr) {
    run.state.grad_scale = run.scaler->state().scale;
    run.state.grad_scale_growth_tracker = run.scaler->state().growth_tracker;
  }
  run.optimizer->zero_grad();
  ++run.state.global_step;
  return absl::OkStatus();
}

// After the optimizer step that ended batch `batch` (whose loss was `loss`): logs the loss, writes
// a checkpoint, redraws the progress line, as the options say; true when fit must stop (max_steps,
// max_time or a signal).
absl::StatusOr<bool> Trainer::AfterOptimizerStep(FitRun& run, int64_t batch, double loss) {
  TrainingState& state = run.state;
  // Before the step's log line and checkpoint: a restart says how many steps it re-runs, and the
  // checkpoint it continues from is never ahead of the step reported.
  SetWorkerProgress(state.global_step);
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
  if (InMemoryCommit* commit = options_.in_memory_commit.get()) {
    commit->reached_step = state.global_step;
    if (state.global_step % commit->every_n_steps == 0) {
      RETURN_IF_ERROR(CommitInMemory(run));
      if (commit->after_commit) RETURN_IF_ERROR(commit->after_commit());
    }
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

// After the epoch's batches (all of them, or up to a stop): the epoch's loss, validation when due,
// the checkpoint, and the epoch's line.
absl::Status Trainer::EndEpoch(FitRun& run, const Dataset* validation) {
  TrainingState& state = run.state;
  const int64_t epoch = run.epoch;
  const bool epoch_done = state.batch_in_epoch >= run.batches;
  if (epoch_done) {
    state.epoch = epoch + 1;
    state.batch_in_epoch = 0;
    state.epoch_start = 0;
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
  if (epoch_done && ValidatesThisEpoch(run) && run.whole_epoch_batches % run.val_every == 0) {
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

}  // namespace ddpspawn
