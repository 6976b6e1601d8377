// The training loops, run inside every rank on a DDPSpawnStrategy: fit (epochs
// or steps, gradient accumulation with no_sync, gradient clipping, validation
// every n epochs, a step LR schedule, callbacks), validate, test and predict (predictions
// gathered to rank 0 in dataset order). Data is sharded by a
// DistributedSampler; metrics are averaged across ranks and written by rank 0
// to <root>/metrics.csv; rank 0 checkpoints to <root>/checkpoints/last.ckpt
// (atomically) after every epoch (and every checkpoint_every_n_steps steps)
// and when training stops, and resuming from it
// continues exactly where it stopped. A training loss (or weights) that becomes
// NaN or infinite stops fit with an error on every rank, before any checkpoint
// of the diverged weights is written, unless allow_non_finite_loss. Which
// rank arrived last at the collectives (and by how much) goes to metrics.csv
// each epoch and into the result (comm/arrival_report.h).
#ifndef DDPSPAWN_CORE_TRAIN_TRAINER_H_
#define DDPSPAWN_CORE_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/model/checkpoint.h"
#include "core/model/module.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/batch_amount.h"
#include "core/train/callback.h"
#include "core/train/checkpoint_connector.h"
#include "core/train/dataset.h"
#include "core/train/fit_profiler.h"
#include "core/train/fit_result.h"
#include "core/train/metric_logger.h"
#include "core/train/optimizer_factory.h"

namespace ddpspawn {

// The most intra-op threads per rank (num_threads): above the hardware threads
// of the largest machines (2 x 192 cores x 2 SMT = 768), where more only
// oversubscribe. A fixed bound, not one from this machine's cores, so that an
// option is valid or not wherever it is parsed (the launcher, a binding, a
// rank).
inline constexpr int kMaxNumThreads = 1024;

struct TrainerOptions {
  int64_t max_epochs = 10;
  int64_t max_steps = -1;  // > 0: stop after this many optimizer steps
  int accumulate_grad_batches = 1;
  double gradient_clip_val = 0.0;  // 0: off
  GradientClipAlgorithm gradient_clip_algorithm = GradientClipAlgorithm::kNorm;
  int check_val_every_n_epoch = 1;
  int64_t batch_size = 32;  // per rank
  // Threads that read each batch's samples from a Dataset's SampleDataset
  // (Lightning's DataLoader num_workers; 0: the training thread). In-memory
  // datasets need none.
  int num_workers = 0;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  std::string default_root_dir = "ddpspawn_logs";
  std::string resume_from;  // a checkpoint to continue from
  int num_threads = 0;      // intra-op threads per rank, <= kMaxNumThreads; 0: cores / local ranks
  int log_every_n_steps = 10;
  // > 0: also write the checkpoint every this many optimizer steps within an
  // epoch (not only at its end), so that a restart (max_restarts) resumes
  // from at most that many steps back, to the same weights.
  int64_t checkpoint_every_n_steps = 0;
  bool enable_progress = true;  // rank 0: a progress bar on a terminal, else a line per epoch
  // false: a NaN or infinite training loss on any rank (or non-finite weights)
  // stops fit on every rank with an error naming the epoch, step and rank,
  // and no checkpoint of it is written. Checked where the loss is all-reduced
  // anyway: every log_every_n_steps steps and at the end of each epoch.
  bool allow_non_finite_loss = false;
  // Lightning's max_time: fit stops after the first optimizer step that ends
  // past it on any rank (every rank agrees through one small all-reduce per
  // step), writes its checkpoint and returns as if done.
  absl::Duration max_time = absl::InfiniteDuration();
  // A signal (SIGUSR1: SLURM's warning before it ends or pre-empts a job, as
  // Lightning's SLURM requeue uses it) on which fit saves its checkpoint after
  // the current step, on every rank together (one small all-reduce per step
  // agrees on it), and returns with stopped_by = the signal's name; 0: none
  // (the signal keeps its default action).
  int checkpoint_on_signal = 0;
  // Lightning's limits on the batches of each loop, per epoch and rank (a
  // count, or a fraction of the rank's batches); a limit of 0 validation
  // batches turns validation off.
  BatchAmount limit_train_batches = BatchAmount::All();
  BatchAmount limit_val_batches = BatchAmount::All();
  BatchAmount limit_test_batches = BatchAmount::All();
  BatchAmount limit_predict_batches = BatchAmount::All();
  // Validate after every this many training batches of an epoch that
  // validates, or at this fraction of the epoch's batches (1.0: at its end);
  // not at the epoch's end unless its batches are a multiple (Lightning's).
  BatchAmount val_check_interval = BatchAmount::All();
  // Before the first epoch, this many validation batches on every rank, to
  // find an error in validation before hours of training; their metrics are
  // not logged. -1: the whole validation set. Lightning's default, 2.
  int64_t num_sanity_val_steps = 2;
  // Lightning's fast_dev_run: n > 0 runs n batches of training and of
  // validation (and of test and predict), one epoch, no sanity steps and no
  // callback that writes or stops (ModelCheckpoint, EarlyStopping,
  // LearningRateMonitor); last.ckpt is still written.
  int64_t fast_dev_run = 0;
  // Lightning's overfit_batches (a count or a fraction; 0: off): train on the
  // first batches of each rank's unshuffled shard, and validate on them.
  BatchAmount overfit_batches = BatchAmount::Count(0);
  // Where rank 0 logs (metric_logger.h): "csv" (metrics.csv, the result's
  // metrics_csv; hparams.yaml) and/or "tensorboard" (event files in
  // <default_root_dir>/tensorboard).
  std::vector<std::string> loggers = {"csv"};
  // Logged once at fit's start by every logger (the CLI's: the options given).
  std::map<std::string, std::string> hyperparameters;
  // Lightning's profiler for fit (fit_profiler.h): simple or pytorch.
  ProfilerKind profiler = ProfilerKind::kNone;
  // LibTorch's deterministic algorithms on every rank
  // (at::globalContext().setDeterministicAlgorithms): an op that has none is
  // an error, as in torch.use_deterministic_algorithms(True).
  bool deterministic = false;
  // ZeRO stage 1 (zero_redundancy_optimizer.h): each rank keeps and steps the
  // optimizer state of its shard of the parameters only. Checkpoints hold the
  // unsharded state (consolidated on rank 0). With one process and no group,
  // the one shard is the whole optimizer.
  bool zero_redundancy_optimizer = false;
  // Fit calls their hooks in this order on every rank (callback.h); their
  // names must differ.
  std::vector<std::shared_ptr<Callback>> callbacks;
};

// Runs the loops of one rank on `strategy`, which must outlive it. Not
// thread-safe: one call at a time.
class Trainer {
 public:
  Trainer(DDPSpawnStrategy& strategy, TrainerOptions options);

  absl::StatusOr<FitResult> Fit(const std::shared_ptr<LightningModule>& module,
                                const Dataset& train, const Dataset* validation);
  // Metrics averaged over the dataset and the ranks (e.g. val_loss,
  // val_accuracy).
  absl::StatusOr<std::map<std::string, double>> Validate(
      const std::shared_ptr<LightningModule>& module, const Dataset& data);
  absl::StatusOr<std::map<std::string, double>> Test(const std::shared_ptr<LightningModule>& module,
                                                     const Dataset& data);
  // Rank 0: every sample's prediction, in dataset order; other ranks: an
  // undefined tensor.
  absl::StatusOr<at::Tensor> Predict(const std::shared_ptr<LightningModule>& module,
                                     const Dataset& data);

 private:
  // Fit() in steps; FitRun holds what they share (trainer.cc).
  struct FitRun;
  class FitContext;  // what callbacks see of a FitRun
  // Fit() but for telling the callbacks of an error.
  absl::StatusOr<FitResult> FitAndReport(const std::shared_ptr<LightningModule>& module,
                                         const Dataset& train, const Dataset* validation);
  // The optimizer `config` makes, sharded with zero_redundancy_optimizer.
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeFitOptimizer(
      const OptimizerConfig& config, const std::vector<at::Tensor>& parameters);
  // Every rank's optimizer state bytes (its shard's when sharded), by rank;
  // an all-gather.
  absl::StatusOr<std::vector<int64_t>> OptimizerStateBytesPerRank(
      const torch::optim::Optimizer& optimizer);
  absl::StatusOr<std::unique_ptr<FitRun>> StartFit(const std::shared_ptr<LightningModule>& module,
                                                   const Dataset& train);
  absl::Status TrainEpoch(FitRun& run, const Dataset& train, const Dataset* validation);
  // Whether fit validates in run's epoch (given data, check_val_every_n_epoch).
  bool ValidatesThisEpoch(const FitRun& run) const;
  // Validation within fit: its hooks, and its metrics logged (and returned).
  absl::StatusOr<std::map<std::string, double>> ValidateInFit(FitRun& run,
                                                              const Dataset& validation);
  absl::Status OptimizerStep(FitRun& run);
  absl::StatusOr<bool> AfterOptimizerStep(FitRun& run, int64_t batch, double loss);
  absl::Status EndEpoch(FitRun& run, const Dataset* validation);
  // The group's arrivals so far (not measured without a group), and on gloo
  // every rank's time blocked in collectives: a collective (one all-gather).
  absl::StatusOr<ArrivalReport> Arrivals();
  // Rank 0 writes the epoch's arrivals to metrics.csv (rows only; the result
  // has the whole fit's report): straggler_rank, and
  // per rank r, where arrivals are timed, rank<r>_arrived_last (the share of
  // the epoch's collectives it reached last) and rank<r>_late_ms, and on
  // gloo rank<r>_blocked_s.
  absl::Status LogArrivals(FitRun& run);

  absl::Status Prepare(const std::shared_ptr<LightningModule>& module);
  // `limit` (named `option` in its error) bounds each rank's batches.
  absl::StatusOr<std::map<std::string, double>> Evaluate(
      const std::shared_ptr<LightningModule>& module, const Dataset& data, bool test,
      const BatchAmount& limit, absl::string_view option);
  // Runs `step` on each batch of this rank's shard of `data`, in order (no
  // shuffle), in eval mode; returns the shard's indices. Padded: every rank
  // gets as many samples, the last ones repeating the first samples of the
  // dataset. Unpadded (exactly_once): every sample is in one shard only, so a
  // shard may be one sample shorter; one left with none runs a single batch of
  // a sample that `step` is told not to count (`counted` false), so that every
  // rank still learns the metrics' names.
  // At most `limit` of the batches (of the padded shard's, so that every rank
  // takes as many), named `option` in its error.
  absl::StatusOr<std::vector<int64_t>> ForEachShardBatch(
      LightningModule& module, const Dataset& data, bool exactly_once, const BatchAmount& limit,
      absl::string_view option,
      const std::function<absl::Status(const Batch&, int64_t, bool counted)>& step);
  absl::Status Log(int64_t epoch, int64_t step, const std::string& name, double value);
  // Rank 0's row for its loggers alone (metrics.csv, TensorBoard): a figure of
  // the run (the straggler report's), not a metric the result, callbacks or
  // monitors see.
  absl::Status WriteMetricRow(int64_t epoch, int64_t step, const std::string& name, double value);
  // With every callback's state.
  absl::Status SaveCheckpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                              TrainingState state, const std::string& path);
  // Calls `hook` on each callback, in order; the first error stops.
  absl::Status CallHooks(const std::function<absl::Status(Callback&)>& hook);

  DDPSpawnStrategy& strategy_;
  TrainerOptions options_;
  std::map<std::string, double> last_metrics_;
  std::map<std::string, double> epoch_metrics_;         // those logged in fit's current epoch
  std::vector<std::unique_ptr<MetricLogger>> loggers_;  // rank 0's, made by StartFit
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_TRAINER_H_
