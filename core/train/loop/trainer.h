// The training loops, run inside every rank on a DDPSpawnStrategy: fit (epochs or steps, gradient
// accumulation with no_sync, gradient clipping, validation every n epochs, a step LR schedule,
// callbacks), validate, test and predict (predictions gathered to rank 0 in dataset order). Data is
// sharded by a DistributedSampler; metrics are averaged across ranks and written by rank 0 to
// <root>/metrics.csv; rank 0 checkpoints to <root>/checkpoints/last.ckpt (atomically) after every
// epoch (and every checkpoint_every_n_steps steps) and when training stops, and resuming from it
// continues exactly where it stopped. A training loss (or weights) that becomes NaN or infinite
// stops fit with an error on every rank, before any checkpoint of the diverged weights is written,
// unless allow_non_finite_loss. Which rank arrived last at the collectives (and by how much) goes
// to metrics.csv each epoch and into the result (comm/arrival_report.h).
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_TRAINER_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_TRAINER_H_

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
#include "core/train/callbacks/callback.h"
#include "core/train/data/dataset.h"
#include "core/train/loggers/fit_profiler.h"
#include "core/train/loggers/metric_logger.h"
#include "core/train/loop/batch_amount.h"
#include "core/train/loop/checkpoint_connector.h"
#include "core/train/loop/fit_result.h"
#include "core/train/loop/optimizer_factory.h"
#include "core/train/loop/trainer_options.h"

namespace ddpspawn {

// Runs the loops of one rank on `strategy`, which must outlive it. Not thread-safe: one call at a
// time.
class Trainer {
 public:
  Trainer(DDPSpawnStrategy& strategy, TrainerOptions options);

  absl::StatusOr<FitResult> Fit(const std::shared_ptr<LightningModule>& module,
                                const Dataset& train, const Dataset* validation);
  // Metrics averaged over the dataset and the ranks (e.g. val_loss, val_accuracy).
  absl::StatusOr<std::map<std::string, double>> Validate(
      const std::shared_ptr<LightningModule>& module, const Dataset& data);
  absl::StatusOr<std::map<std::string, double>> Test(const std::shared_ptr<LightningModule>& module,
                                                     const Dataset& data);
  // Rank 0: every sample's prediction, in dataset order; other ranks: an undefined tensor.
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
  // Every rank's `mine`, by rank (a collective).
  absl::StatusOr<std::vector<int64_t>> PerRank(int64_t mine);
  // Every rank's optimizer state bytes (its shard's when sharded), by rank; an all-gather.
  absl::StatusOr<std::vector<int64_t>> OptimizerStateBytesPerRank(
      const torch::optim::Optimizer& optimizer);
  // StartFit's steps (trainer.cc).
  absl::Status PrepareFitOutputs();
  absl::Status ResumeFit(LightningModule& module, FitRun& run);
  absl::Status PlanEpochs(const Dataset& train, FitRun& run);
  absl::StatusOr<std::unique_ptr<FitRun>> StartFit(const std::shared_ptr<LightningModule>& module,
                                                   const Dataset& train);
  absl::Status TrainEpoch(FitRun& run, const Dataset& train, const Dataset* validation);
  // TrainEpoch's steps (fit_loop.cc).
  absl::Status BeginEpoch(FitRun& run);
  absl::StatusOr<double> TrainOnBatch(FitRun& run, const Batch& batch, int64_t b, bool step_now);
  // Whether fit validates in run's epoch (given data, check_val_every_n_epoch).
  bool ValidatesThisEpoch(const FitRun& run) const;
  // Validation within fit: its hooks, and its metrics logged (and returned).
  absl::StatusOr<std::map<std::string, double>> ValidateInFit(FitRun& run,
                                                              const Dataset& validation);
  absl::Status OptimizerStep(FitRun& run);
  absl::StatusOr<bool> AfterOptimizerStep(FitRun& run, int64_t batch, double loss);
  absl::Status EndEpoch(FitRun& run, const Dataset* validation);
  // The group's arrivals so far (not measured without a group), and on gloo every rank's time
  // blocked in collectives: a collective (one all-gather).
  absl::StatusOr<ArrivalReport> Arrivals();
  // Rank 0 writes the epoch's arrivals to metrics.csv (rows only; the result has the whole fit's
  // report): straggler_rank, and per rank r, where arrivals are timed, rank<r>_arrived_last (the
  // share of the epoch's collectives it reached last) and rank<r>_late_ms, and on gloo
  // rank<r>_blocked_s.
  absl::Status LogArrivals(FitRun& run);

  absl::Status Prepare(const std::shared_ptr<LightningModule>& module);
  // `limit` (named `option` in its error) bounds each rank's batches. EvaluateWhole() is its body,
  // which it runs with the parameters whole (full_shard).
  absl::StatusOr<std::map<std::string, double>> Evaluate(
      const std::shared_ptr<LightningModule>& module, const Dataset& data, bool test,
      const BatchAmount& limit, absl::string_view option);
  absl::StatusOr<std::map<std::string, double>> EvaluateWhole(
      const std::shared_ptr<LightningModule>& module, const Dataset& data, bool test,
      const BatchAmount& limit, absl::string_view option);
  // Runs `step` on each batch of this rank's shard of `data`, in order (no shuffle), in eval mode;
  // returns the shard's indices. Padded: every rank gets as many samples, the last ones repeating
  // the first samples of the dataset. Unpadded (exactly_once): every sample is in one shard only,
  // so a shard may be one sample shorter; one left with none runs a single batch of a sample that
  // `step` is told not to count (`counted` false), so that every rank still learns the metrics'
  // names. At most `limit` of the batches (of the padded shard's, so that every rank takes as
  // many), named `option` in its error.
  absl::StatusOr<std::vector<int64_t>> ForEachShardBatch(
      LightningModule& module, const Dataset& data, bool exactly_once, const BatchAmount& limit,
      absl::string_view option,
      const std::function<absl::Status(const Batch&, int64_t, bool counted)>& step);
  absl::Status Log(int64_t epoch, int64_t step, const std::string& name, double value);
  // Rank 0's row for its loggers alone (metrics.csv, TensorBoard): a figure of the run (the
  // straggler report's), not a metric the result, callbacks or monitors see.
  absl::Status WriteMetricRow(int64_t epoch, int64_t step, const std::string& name, double value);
  // With every callback's state; SaveWholeCheckpoint() is its body, which it runs with the
  // parameters whole (full_shard).
  absl::Status SaveCheckpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                              TrainingState state, const std::string& path);
  absl::Status SaveWholeCheckpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                                   TrainingState state, const std::string& path);
  // Fit's state into options_.in_memory_commit (every rank's; a collective).
  absl::Status CommitInMemory(FitRun& run);
  // ResumeFit's part for the in-memory commit of options_.in_memory_commit->step (a collective).
  absl::Status RestoreCommit(LightningModule& module, FitRun& run);
  // What every checkpoint adds to the loop's state: every rank's RNG state and epoch losses, the
  // world size and each callback's state. A collective.
  absl::Status CompleteCheckpointState(TrainingState& state);
  // ResumeFit's part for a sharded checkpoint (options_.sharded_checkpoints' kind).
  absl::Status ResumeSharded(LightningModule& module, FitRun& run);
  // Whether the strategy shards the parameters themselves (full_shard).
  bool sharding_parameters() const {
    return strategy_.options().sharding_strategy == ShardingStrategy::kFullShard;
  }
  // Calls `hook` on each callback, in order; the first error stops.
  absl::Status CallHooks(const std::function<absl::Status(Callback&)>& hook);

  DDPSpawnStrategy& strategy_;
  TrainerOptions options_;
  std::map<std::string, double> last_metrics_;
  std::map<std::string, double> epoch_metrics_;         // those logged in fit's current epoch
  std::vector<std::unique_ptr<MetricLogger>> loggers_;  // rank 0's, made by StartFit
  // full_shard: the last fit left the parameters whole (a GatherParameters() the next one
  // releases).
  bool parameters_whole_after_fit_ = false;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_TRAINER_H_
