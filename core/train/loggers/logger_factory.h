// The loggers by their Lightning names: checking a list of names, and making the loggers it names.
// Above the loggers it makes (csv_logger.h, tensorboard_logger.h), which know nothing of it.
#ifndef DDPSPAWN_CORE_TRAIN_LOGGERS_LOGGER_FACTORY_H_
#define DDPSPAWN_CORE_TRAIN_LOGGERS_LOGGER_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/train/loggers/metric_logger.h"

namespace ddpspawn {

// "csv" and "tensorboard", Lightning's logger names.
inline constexpr absl::string_view kLoggerNames[] = {"csv", "tensorboard"};

// Checks a comma-separated list of logger names ("csv,tensorboard"): each known, none twice, at
// least one.
absl::StatusOr<std::vector<std::string>> ParseLoggerNames(absl::string_view list);

// The loggers `names` asks for, writing under `dir` (an output directory fit prepared): csv writes
// dir/metrics.csv and dir/hparams.yaml, tensorboard a new event file in dir/tensorboard/.
absl::StatusOr<std::vector<std::unique_ptr<MetricLogger>>> MakeMetricLoggers(
    const std::vector<std::string>& names, const std::string& dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOGGERS_LOGGER_FACTORY_H_
