// Early stopping (see early_stopping.h).
#include "core/train/callbacks/early_stopping.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

double WorstScore(MonitorMode mode) {
  return mode == MonitorMode::kMax ? -std::numeric_limits<double>::infinity()
                                   : std::numeric_limits<double>::infinity();
}

}  // namespace

absl::Status CheckEarlyStoppingOptions(const EarlyStoppingOptions& options) {
  if (options.monitor.empty()) return absl::OkStatus();
  if (options.patience < 0) {
    return absl::InvalidArgumentError("early_stopping_patience must be >= 0");
  }
  if (!(options.min_delta >= 0) || !std::isfinite(options.min_delta)) {
    return absl::InvalidArgumentError("early_stopping_min_delta must be a finite number >= 0");
  }
  return ResolveMonitorMode(options.mode, options.monitor, "early_stopping_monitor",
                            "early_stopping_mode")
      .status();
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(std::move(options)),
      mode_(ResolveMonitorMode(options_.mode, options_.monitor, "", "")
                .value_or(MonitorMode::kMin)),  // CheckEarlyStoppingOptions refused the rest
      best_(WorstScore(mode_)) {}

absl::Status EarlyStopping::OnTrainEpochEnd(CallbackContext& context) {
  ASSIGN_OR_RETURN(const std::optional<double> value,
                   ValueThisEpoch(context, "EarlyStopping monitors", options_.monitor));
  if (!value.has_value()) return absl::OkStatus();
  const double current = *value;
  std::string why;
  if (options_.check_finite && !std::isfinite(current)) {
    why = absl::StrCat("early stopping: ", options_.monitor, " became ", current);
  } else if (mode_ == MonitorMode::kMin ? current < best_ - options_.min_delta
                                        : current > best_ + options_.min_delta) {
    best_ = current;
    best_epoch_ = context.epoch();
    wait_count_ = 0;
  } else if (++wait_count_ >= options_.patience) {
    why = absl::StrFormat(
        "early stopping: %s did not improve by more than %g in %d checks (best %.6g at epoch %d)",
        options_.monitor, options_.min_delta, wait_count_, best_, best_epoch_ + 1);
  }
  // The metrics are the same on every rank, and so the decision; agreeing on it costs one small
  // all-reduce per epoch and makes sure.
  ASSIGN_OR_RETURN(bool stop, context.AnyRank(!why.empty()));
  if (stop) {
    context.RequestStop("early_stopping", why.empty() ? "early stopping on another rank" : why);
  }
  return absl::OkStatus();
}

std::string EarlyStopping::OnSaveCheckpoint() const {
  return EncodeStateNumbers({{"best", best_},
                             {"best_epoch", static_cast<double>(best_epoch_)},
                             {"wait_count", wait_count_}});
}

absl::Status EarlyStopping::OnLoadCheckpoint(absl::string_view state) {
  ASSIGN_OR_RETURN(const std::vector<double> values,
                   DecodeStateNumbers(state, {"best", "best_epoch", "wait_count"}, name()));
  best_ = values[0];
  best_epoch_ = static_cast<int64_t>(values[1]);
  wait_count_ = static_cast<int>(values[2]);
  return absl::OkStatus();
}

}  // namespace ddpspawn
