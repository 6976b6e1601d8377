// Lightning's CSVLogger: fit's metrics in <dir>/metrics.csv, its hyperparameters in
// <dir>/hparams.yaml.
#ifndef DDPSPAWN_CORE_TRAIN_LOGGERS_CSV_LOGGER_H_
#define DDPSPAWN_CORE_TRAIN_LOGGERS_CSV_LOGGER_H_

#include <memory>
#include <string>

#include "core/train/loggers/metric_logger.h"

namespace ddpspawn {

// A logger that appends a row to dir/metrics.csv (epoch,step,name,value) per metric, never through
// a link, and writes dir/hparams.yaml atomically.
std::unique_ptr<MetricLogger> MakeCsvLogger(const std::string& dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOGGERS_CSV_LOGGER_H_
