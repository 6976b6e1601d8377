// Trainer::FitRun, one Fit() in progress (what its steps share), and Trainer::FitContext, the
// callbacks' view of it (callback.h): private to the Trainer's files (trainer.cc starts and ends a
// fit, fit_loop.cc runs its epochs).
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_FIT_RUN_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_FIT_RUN_H_

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "core/train/data/sampler.h"
#include "core/train/loop/logged_metrics.h"
#include "core/train/loop/metric_sync.h"
#include "core/train/loop/trainer.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

// One Fit() in progress: what its steps share. Thread-compatible: the training thread owns it.
struct Trainer::FitRun {
  FitRun(std::shared_ptr<LightningModule> trained, const TrainerOptions& options)
      : module(std::move(trained)), watch(options.allow_non_finite_loss, options.resume_from) {}

  std::shared_ptr<LightningModule> module;
  OptimizerConfig config;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  TrainingState state;
  std::optional<DistributedSampler> sampler;
  std::string checkpoint;  // last.ckpt
  int64_t batches = 0;     // of the epoch in progress, in this rank's shard
  // Of a whole epoch (batches but in an epoch that ranks deal from its state.epoch_start on).
  int64_t whole_epoch_batches = 0;
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

  // `state` as a checkpoint keeps it: mid-epoch, with this rank's loss of the epoch so far
  // (Trainer::SaveCheckpoint gathers every rank's).
  TrainingState ToSave() const {
    TrainingState saved = state;
    if ((state.batch_in_epoch > 0 || state.epoch_start > 0) && epoch_batches > 0) {
      saved.epoch_loss_sum_per_rank = {epoch_loss};
      saved.epoch_loss_batches = epoch_batches;
    }
    return saved;
  }
};

// The callbacks' view of a FitRun (callback.h). Borrows the trainer and the run, which outlive it
// (FitAndReport's).
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

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_FIT_RUN_H_
