// Lightning's CSVLogger: fit's metrics in <dir>/metrics.csv, its hyperparameters in
// <dir>/hparams.yaml.
#ifndef DDPSPAWN_CORE_TRAIN_LOGGERS_CSV_LOGGER_H_
#define DDPSPAWN_CORE_TRAIN_LOGGERS_CSV_LOGGER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/train/loggers/metric_logger.h"

namespace ddpspawn {

// A logger that appends a row to dir/metrics.csv (epoch,step,name,value) per metric, never through
// a link, and writes dir/hparams.yaml atomically.
std::unique_ptr<MetricLogger> MakeCsvLogger(const std::string& dir);

// A name that is empty or holds a comma, a quote or a line break (it cannot be a metrics.csv value)
// is InvalidArgument naming it. Every rank checks, so that every rank fails alike.
absl::Status CheckMetricNames(const std::vector<std::pair<std::string, double>>& values);

// What a loop of one's own logs on rank 0 (Fabric::Log, the C ABI's ddpspawn_log_metrics): checks
// the names (CheckMetricNames, before any row is written), makes `dir` where missing and appends a
// row per value to dir/metrics.csv, as the CSV logger does.
absl::Status AppendMetricRows(const std::string& dir, int64_t epoch, int64_t step,
                              const std::vector<std::pair<std::string, double>>& values);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOGGERS_CSV_LOGGER_H_
