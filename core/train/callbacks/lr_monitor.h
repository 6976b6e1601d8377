// Lightning's LearningRateMonitor: logs the optimizer's learning rate as "lr-<Optimizer>" (lr-SGD,
// lr-Adam, lr-AdamW) to metrics.csv, at each epoch's start or every log_every_n_steps optimizer
// steps.
#ifndef DDPSPAWN_CORE_TRAIN_CALLBACKS_LR_MONITOR_H_
#define DDPSPAWN_CORE_TRAIN_CALLBACKS_LR_MONITOR_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/train/callbacks/callback.h"

namespace ddpspawn {

enum class LoggingInterval { kNone, kEpoch, kStep };
absl::string_view LoggingIntervalName(LoggingInterval interval);
absl::StatusOr<LoggingInterval> ParseLoggingInterval(absl::string_view name);

// Thread-compatible; one fit at a time.
class LearningRateMonitor : public Callback {
 public:
  // `every_n_steps`: with kStep, the optimizer steps between entries.
  LearningRateMonitor(LoggingInterval interval, int every_n_steps);

  std::string name() const override { return "LearningRateMonitor"; }
  bool RunsInFastDevRun() const override { return false; }
  absl::Status OnTrainEpochStart(CallbackContext& context) override;
  absl::Status OnTrainBatchEnd(CallbackContext& context, int64_t batch, bool stepped) override;

 private:
  absl::Status LogRate(CallbackContext& context);

  LoggingInterval interval_;
  int every_n_steps_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_CALLBACKS_LR_MONITOR_H_
