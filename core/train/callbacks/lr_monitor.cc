// The learning-rate monitor (see lr_monitor.h).
#include "core/train/callbacks/lr_monitor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"

namespace ddpspawn {

constexpr NamedValue<LoggingInterval> kLoggingIntervalNames[] = {
    {"none", LoggingInterval::kNone},
    {"epoch", LoggingInterval::kEpoch},
    {"step", LoggingInterval::kStep},
};

absl::string_view LoggingIntervalName(LoggingInterval interval) {
  return NameOf(kLoggingIntervalNames, interval);
}

absl::StatusOr<LoggingInterval> ParseLoggingInterval(absl::string_view name) {
  return ParseName(kLoggingIntervalNames, "logging interval", name);
}

LearningRateMonitor::LearningRateMonitor(LoggingInterval interval, int every_n_steps)
    : interval_(interval), every_n_steps_(std::max(1, every_n_steps)) {}

absl::Status LearningRateMonitor::OnTrainEpochStart(CallbackContext& context) {
  return interval_ == LoggingInterval::kEpoch ? LogRate(context) : absl::OkStatus();
}

absl::Status LearningRateMonitor::OnTrainBatchEnd(CallbackContext& context, int64_t /*batch*/,
                                                  bool stepped) {
  if (interval_ != LoggingInterval::kStep || !stepped ||
      context.global_step() % every_n_steps_ != 0) {
    return absl::OkStatus();
  }
  return LogRate(context);
}

absl::Status LearningRateMonitor::LogRate(CallbackContext& context) {
  return context.Log(absl::StrCat("lr-", context.optimizer_name()), context.learning_rate());
}

}  // namespace ddpspawn
