// Where fit's metrics go, Lightning's loggers: the interface of the CSV file (csv_logger.h) and
// TensorBoard's event files (tensorboard_logger.h), which logger_factory.h makes by name. Rank 0
// alone makes and calls them.
#ifndef DDPSPAWN_CORE_TRAIN_LOGGERS_METRIC_LOGGER_H_
#define DDPSPAWN_CORE_TRAIN_LOGGERS_METRIC_LOGGER_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"

namespace ddpspawn {

// Not thread-safe: fit's thread on rank 0 calls it. Owns what it writes.
class MetricLogger {
 public:
  virtual ~MetricLogger() = default;
  // The run's hyperparameters (option name, its value as text), once before the first metric.
  virtual absl::Status LogHyperparameters(const std::map<std::string, std::string>& params) = 0;
  virtual absl::Status LogMetric(int64_t epoch, int64_t step, const std::string& name,
                                 double value) = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOGGERS_METRIC_LOGGER_H_
