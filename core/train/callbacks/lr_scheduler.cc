// Learning-rate schedules (see lr_scheduler.h).
#include "core/train/callbacks/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// From `start` at fraction 0 to `end` at fraction 1, along half a cosine.
double CosineBetween(double start, double end, double fraction) {
  const double f = std::clamp(fraction, 0.0, 1.0);
  return end + (start - end) * (1 + std::cos(M_PI * f)) / 2;
}

// torch's ReduceLROnPlateau default: an improvement is better by 1e-4 of the best (relative).
constexpr double kPlateauThreshold = 1e-4;

}  // namespace

constexpr NamedValue<LrSchedule> kLrScheduleNames[] = {
    {"none", LrSchedule::kNone},
    {"cosine", LrSchedule::kCosine},
    {"onecycle", LrSchedule::kOneCycle},
    {"plateau", LrSchedule::kPlateau},
};

absl::string_view LrScheduleName(LrSchedule schedule) { return NameOf(kLrScheduleNames, schedule); }

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name) {
  return ParseName(kLrScheduleNames, "learning-rate schedule", name);
}

absl::Status CheckLrSchedulerOptions(const LrSchedulerOptions& options) {
  if (options.schedule == LrSchedule::kNone) return absl::OkStatus();
  if (options.warmup_steps < 0) return absl::InvalidArgumentError("lr_warmup_steps must be >= 0");
  if (options.schedule == LrSchedule::kOneCycle && options.warmup_steps > 0) {
    return absl::InvalidArgumentError(
        "lr_warmup_steps does not go with onecycle, which warms up by itself "
        "(lr_onecycle_pct_start)");
  }
  if (!(options.onecycle_pct_start > 0 && options.onecycle_pct_start < 1)) {
    return absl::InvalidArgumentError("lr_onecycle_pct_start must be in (0, 1)");
  }
  if (!(options.onecycle_div_factor >= 1) || !(options.onecycle_final_div_factor >= 1)) {
    return absl::InvalidArgumentError("the one-cycle division factors must be >= 1");
  }
  if (!(options.plateau_factor > 0 && options.plateau_factor < 1)) {
    return absl::InvalidArgumentError("lr_plateau_factor must be in (0, 1)");
  }
  if (options.plateau_patience < 0) {
    return absl::InvalidArgumentError("lr_plateau_patience must be >= 0");
  }
  if (options.schedule == LrSchedule::kPlateau) {
    if (options.plateau_monitor.empty()) {
      return absl::InvalidArgumentError("lr_plateau_monitor names no metric");
    }
    RETURN_IF_ERROR(ResolveMonitorMode(options.plateau_mode, options.plateau_monitor,
                                       "lr_plateau_monitor", "lr_plateau_mode")
                        .status());
  }
  return absl::OkStatus();
}

double ScheduledLearningRate(const LrSchedulerOptions& options, double base, int64_t done,
                             int64_t total) {
  if (options.schedule == LrSchedule::kOneCycle) {
    const double steps = static_cast<double>(std::max<int64_t>(total, 1));
    const double rising = options.onecycle_pct_start * steps;
    const double initial = base / options.onecycle_div_factor;
    const double final = initial / options.onecycle_final_div_factor;
    const double t = static_cast<double>(done);
    if (t < rising) return CosineBetween(initial, base, t / rising);
    return CosineBetween(base, final, (t - rising) / std::max(steps - rising, 1.0));
  }
  const int64_t warmup = options.warmup_steps;
  if (done < warmup) {
    return base * static_cast<double>(done + 1) / static_cast<double>(warmup);
  }
  if (options.schedule == LrSchedule::kCosine) {
    const int64_t span = total - warmup;
    const double fraction =
        span <= 0 ? 1.0 : static_cast<double>(done - warmup) / static_cast<double>(span);
    return CosineBetween(base, options.min_lr, fraction);
  }
  return base;
}

LrScheduler::LrScheduler(LrSchedulerOptions options)
    : options_(std::move(options)),
      plateau_mode_(ResolveMonitorMode(options_.plateau_mode, options_.plateau_monitor, "", "")
                        .value_or(MonitorMode::kMin)),  // CheckLrSchedulerOptions refused the rest
      best_(plateau_mode_ == MonitorMode::kMax ? -std::numeric_limits<double>::infinity()
                                               : std::numeric_limits<double>::infinity()) {}

constexpr NamedValue<LrInterval> kLrIntervalNames[] = {
    {"step", LrInterval::kStep},
    {"epoch", LrInterval::kEpoch},
};

absl::string_view LrIntervalName(LrInterval interval) { return NameOf(kLrIntervalNames, interval); }

absl::StatusOr<LrInterval> ParseLrInterval(absl::string_view name) {
  return ParseName(kLrIntervalNames, "interval", name);
}

void LrScheduler::Apply(CallbackContext& context) const {
  const double base = context.base_learning_rate();
  if (by_epoch()) {
    context.set_learning_rate(
        ScheduledLearningRate(options_, base, context.epoch(), context.total_epochs()));
    return;
  }
  const int64_t done = context.global_step();
  if (options_.schedule == LrSchedule::kPlateau && done >= options_.warmup_steps) {
    context.set_learning_rate(std::max(base * scale_, options_.min_lr));
    return;
  }
  context.set_learning_rate(ScheduledLearningRate(options_, base, done, context.total_steps()));
}

absl::Status LrScheduler::OnTrainEpochStart(CallbackContext& context) {
  Apply(context);
  return absl::OkStatus();
}

absl::Status LrScheduler::OnTrainBatchStart(CallbackContext& context, int64_t /*batch*/) {
  if (!by_epoch()) Apply(context);
  return absl::OkStatus();
}

absl::Status LrScheduler::OnTrainEpochEnd(CallbackContext& context) {
  if (options_.schedule != LrSchedule::kPlateau) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::optional<double> value,
                   ValueThisEpoch(context, "lr_plateau_monitor", options_.plateau_monitor));
  if (!value.has_value()) return absl::OkStatus();
  const double current = *value;
  const bool improved = plateau_mode_ == MonitorMode::kMax
                            ? current > best_ * (1 + kPlateauThreshold)
                            : current < best_ * (1 - kPlateauThreshold);
  if (improved) {
    best_ = current;
    bad_checks_ = 0;
  } else if (++bad_checks_ > options_.plateau_patience) {
    scale_ *= options_.plateau_factor;
    bad_checks_ = 0;
  }
  Apply(context);
  return absl::OkStatus();
}

std::string LrScheduler::OnSaveCheckpoint() const {
  if (options_.schedule != LrSchedule::kPlateau) return "";  // a function of the step
  return EncodeStateNumbers({{"best", best_}, {"bad_checks", bad_checks_}, {"scale", scale_}});
}

absl::Status LrScheduler::OnLoadCheckpoint(absl::string_view state) {
  ASSIGN_OR_RETURN(const std::vector<double> values,
                   DecodeStateNumbers(state, {"best", "bad_checks", "scale"}, name()));
  best_ = values[0];
  bad_checks_ = static_cast<int>(values[1]);
  scale_ = values[2];
  return absl::OkStatus();
}

}  // namespace ddpspawn
