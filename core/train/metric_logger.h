// Where fit's metrics go, Lightning's loggers: the CSV file (metrics.csv and
// hparams.yaml, Lightning's CSVLogger) and TensorBoard's event files
// (tensorboard_logger.h). Rank 0 alone makes and calls them.
#ifndef DDPSPAWN_CORE_TRAIN_METRIC_LOGGER_H_
#define DDPSPAWN_CORE_TRAIN_METRIC_LOGGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// Not thread-safe: fit's thread on rank 0 calls it. Owns what it writes.
class MetricLogger {
 public:
  virtual ~MetricLogger() = default;
  // The run's hyperparameters (option name, its value as text), once before
  // the first metric.
  virtual absl::Status LogHyperparameters(const std::map<std::string, std::string>& params) = 0;
  virtual absl::Status LogMetric(int64_t epoch, int64_t step, const std::string& name,
                                 double value) = 0;
};

// "csv" and "tensorboard", Lightning's logger names.
inline constexpr absl::string_view kLoggerNames[] = {"csv", "tensorboard"};

// Checks a comma-separated list of logger names ("csv,tensorboard"): each
// known, none twice, at least one.
absl::StatusOr<std::vector<std::string>> ParseLoggerNames(absl::string_view list);

// The loggers `names` asks for, writing under `dir` (an output directory fit
// prepared): csv writes dir/metrics.csv and dir/hparams.yaml, tensorboard a
// new event file in dir/tensorboard/.
absl::StatusOr<std::vector<std::unique_ptr<MetricLogger>>> MakeMetricLoggers(
    const std::vector<std::string>& names, const std::string& dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_METRIC_LOGGER_H_
