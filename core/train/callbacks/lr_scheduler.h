// Learning-rate schedules as a fit callback: cosine annealing and one-cycle (set before every
// optimizer step from the step count, or at each epoch's start from the epoch, so a resumed fit
// continues the curve), reduce-on-plateau (a monitored metric checked at the end of each epoch that
// logs it; its scale travels in checkpoints), and a linear warm-up ahead of cosine or plateau.
#ifndef DDPSPAWN_CORE_TRAIN_CALLBACKS_LR_SCHEDULER_H_
#define DDPSPAWN_CORE_TRAIN_CALLBACKS_LR_SCHEDULER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/train/callbacks/callback.h"

namespace ddpspawn {

enum class LrSchedule { kNone, kCosine, kOneCycle, kPlateau };
absl::string_view LrScheduleName(LrSchedule schedule);
absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name);

enum class LrInterval { kStep, kEpoch };
absl::string_view LrIntervalName(LrInterval interval);
absl::StatusOr<LrInterval> ParseLrInterval(absl::string_view name);

struct LrSchedulerOptions {
  LrSchedule schedule = LrSchedule::kNone;
  // Cosine and one-cycle: set before every optimizer step (kStep) or at each epoch's start (kEpoch,
  // over max_epochs; warmup_steps then counts epochs).
  LrInterval interval = LrInterval::kStep;
  // Optimizer steps over which the rate rises linearly to the configured one (cosine and plateau;
  // one-cycle warms up by itself).
  int64_t warmup_steps = 0;
  double min_lr = 0.0;  // cosine's end, plateau's floor
  // One-cycle (torch's OneCycleLR, max_lr = the configured rate): the share of steps spent rising
  // from max_lr / div_factor.
  double onecycle_pct_start = 0.3;
  double onecycle_div_factor = 25.0;
  double onecycle_final_div_factor = 1e4;
  // Plateau (torch's ReduceLROnPlateau): the rate times factor after more than patience checks
  // without an improvement.
  std::string plateau_monitor = "val_loss";
  MonitorMode plateau_mode = MonitorMode::kAuto;
  double plateau_factor = 0.1;
  int plateau_patience = 10;
};

// What the options allow, before any rank starts.
absl::Status CheckLrSchedulerOptions(const LrSchedulerOptions& options);

// The rate for the optimizer step after `done` steps of `total`, for cosine and one-cycle (with
// warm-up); `base` is the configured rate.
double ScheduledLearningRate(const LrSchedulerOptions& options, double base, int64_t done,
                             int64_t total);

// Thread-compatible; one fit at a time.
class LrScheduler : public Callback {
 public:
  explicit LrScheduler(LrSchedulerOptions options);

  std::string name() const override { return "LrScheduler"; }
  absl::Status OnTrainEpochStart(CallbackContext& context) override;
  absl::Status OnTrainBatchStart(CallbackContext& context, int64_t batch) override;
  absl::Status OnTrainEpochEnd(CallbackContext& context) override;
  std::string OnSaveCheckpoint() const override;
  absl::Status OnLoadCheckpoint(absl::string_view state) override;

 private:
  // Sets the rate for the coming optimizer step (epoch, by_epoch()) from where fit stands, so a
  // resumed fit takes it up where it was.
  void Apply(CallbackContext& context) const;
  bool by_epoch() const {
    return options_.interval == LrInterval::kEpoch && options_.schedule != LrSchedule::kPlateau;
  }

  LrSchedulerOptions options_;
  MonitorMode plateau_mode_;  // resolved
  // Plateau: the best value so far, the checks since, the rate's scale.
  double best_;
  int bad_checks_ = 0;
  double scale_ = 1.0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_CALLBACKS_LR_SCHEDULER_H_
