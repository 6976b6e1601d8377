// TrainerOptions: what a Trainer (trainer.h) is asked to do, and its bounds; a header of its own so
// that the run's options and the checkpoint connector read it without the Trainer.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_TRAINER_OPTIONS_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_TRAINER_OPTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/train/callbacks/callback.h"
#include "core/train/loggers/fit_profiler.h"
#include "core/train/loop/batch_amount.h"
#include "core/train/loop/in_memory_commit.h"
#include "core/train/loop/optimizer_factory.h"

namespace ddpspawn {

// The most intra-op threads per rank (num_threads): above the hardware threads of the largest
// machines (2 x 192 cores x 2 SMT = 768), where more only oversubscribe. A fixed bound, not one
// from this machine's cores, so that an option is valid or not wherever it is parsed (the launcher,
// a binding, a rank).
inline constexpr int kMaxNumThreads = 1024;

struct TrainerOptions {
  int64_t max_epochs = 10;
  int64_t max_steps = -1;  // > 0: stop after this many optimizer steps
  int accumulate_grad_batches = 1;
  double gradient_clip_val = 0.0;  // 0: off
  GradientClipAlgorithm gradient_clip_algorithm = GradientClipAlgorithm::kNorm;
  int check_val_every_n_epoch = 1;
  int64_t batch_size = 32;  // per rank
  // Threads that read each batch's samples from a Dataset's SampleDataset (Lightning's DataLoader
  // num_workers; 0: the training thread). In-memory datasets need none.
  int num_workers = 0;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  std::string default_root_dir = "ddpspawn_logs";
  std::string resume_from;  // a checkpoint to continue from
  int num_threads = 0;      // intra-op threads per rank, <= kMaxNumThreads; 0: cores / local ranks
  int log_every_n_steps = 10;
  // > 0: also write the checkpoint every this many optimizer steps within an epoch (not only at its
  // end), so that a restart (max_restarts) resumes from at most that many steps back, to the same
  // weights.
  int64_t checkpoint_every_n_steps = 0;
  bool enable_progress = true;  // rank 0: a progress bar on a terminal, else a line per epoch
  // false: a NaN or infinite training loss on any rank (or non-finite weights) stops fit on every
  // rank with an error naming the epoch, step and rank, and no checkpoint of it is written. Checked
  // where the loss is all-reduced anyway: every log_every_n_steps steps and at the end of each
  // epoch.
  bool allow_non_finite_loss = false;
  // Lightning's max_time: fit stops after the first optimizer step that ends past it on any rank
  // (every rank agrees through one small all-reduce per step), writes its checkpoint and returns as
  // if done.
  absl::Duration max_time = absl::InfiniteDuration();
  // A signal (SIGUSR1: SLURM's warning before it ends or pre-empts a job, as Lightning's SLURM
  // requeue uses it) on which fit saves its checkpoint after the current step, on every rank
  // together (one small all-reduce per step agrees on it), and returns with stopped_by = the
  // signal's name; 0: none (the signal keeps its default action).
  int checkpoint_on_signal = 0;
  // Lightning's limits on the batches of each loop, per epoch and rank (a count, or a fraction of
  // the rank's batches); a limit of 0 validation batches turns validation off.
  BatchAmount limit_train_batches = BatchAmount::All();
  BatchAmount limit_val_batches = BatchAmount::All();
  BatchAmount limit_test_batches = BatchAmount::All();
  BatchAmount limit_predict_batches = BatchAmount::All();
  // Validate after every this many training batches of an epoch that validates, or at this fraction
  // of the epoch's batches (1.0: at its end); not at the epoch's end unless its batches are a
  // multiple (Lightning's).
  BatchAmount val_check_interval = BatchAmount::All();
  // Before the first epoch, this many validation batches on every rank, to find an error in
  // validation before hours of training; their metrics are not logged. -1: the whole validation
  // set. Lightning's default, 2.
  int64_t num_sanity_val_steps = 2;
  // Lightning's fast_dev_run: n > 0 runs n batches of training and of validation (and of test and
  // predict), one epoch, no sanity steps and no callback that writes or stops (ModelCheckpoint,
  // EarlyStopping, LearningRateMonitor); last.ckpt is still written.
  int64_t fast_dev_run = 0;
  // Lightning's overfit_batches (a count or a fraction; 0: off): train on the first batches of each
  // rank's unshuffled shard, and validate on them.
  BatchAmount overfit_batches = BatchAmount::Count(0);
  // Where rank 0 logs (logger_factory.h): "csv" (metrics.csv, the result's metrics_csv;
  // hparams.yaml) and/or "tensorboard" (event files in <default_root_dir>/tensorboard).
  std::vector<std::string> loggers = {"csv"};
  // Logged once at fit's start by every logger (the CLI's: the options given).
  std::map<std::string, std::string> hyperparameters;
  // Lightning's profiler for fit (fit_profiler.h): simple or pytorch.
  ProfilerKind profiler = ProfilerKind::kNone;
  // LibTorch's deterministic algorithms on every rank
  // (at::globalContext().setDeterministicAlgorithms): an op that has none is an error, as in
  // torch.use_deterministic_algorithms(True).
  bool deterministic = false;
  // ZeRO stage 1 (zero_redundancy_optimizer.h): each rank keeps and steps the optimizer state of
  // its shard of the parameters only. Checkpoints hold the unsharded state (consolidated on rank
  // 0). With one process and no group, the one shard is the whole optimizer.
  bool zero_redundancy_optimizer = false;
  // Lightning's FSDPStrategy(state_dict_type="sharded"): fit's checkpoints (last.ckpt and
  // ModelCheckpoint's) are directories that each rank writes its own shard of
  // (core/model/sharded_checkpoint.h), with nothing gathered to rank 0, and they resume on any
  // number of ranks. Needs a ShardGradOpOptimizer (sharding_strategy shard_grad_op or full_shard).
  // false: one file of the unsharded state, which rank 0 writes.
  bool sharded_checkpoints = false;
  // Fit calls their hooks in this order on every rank (callback.h); their names must differ.
  std::vector<std::shared_ptr<Callback>> callbacks;
  // Elastic training (core/train/run/elastic_fit.h): fit commits its state here in memory, and
  // resumes from it when it says so. Null: no commits. Not with a sharded optimizer.
  std::shared_ptr<InMemoryCommit> in_memory_commit;
};

// limit_train_batches or overfit_batches: an epoch is a count of batches, not the whole shard.
inline bool EpochsLimited(const TrainerOptions& options) {
  return !options.limit_train_batches.is_all() || !options.overfit_batches.is_zero();
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_TRAINER_OPTIONS_H_
