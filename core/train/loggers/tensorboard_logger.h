// TensorBoard's event files, written without TensorFlow or protobuf: the few messages a scalar and
// the hyperparameters need (tensorflow.Event, Summary, the HParams plugin's SessionStartInfo),
// encoded by hand in the protobuf wire format, in TFRecord framing (lengths and CRC-32C checksums).
#ifndef DDPSPAWN_CORE_TRAIN_LOGGERS_TENSORBOARD_LOGGER_H_
#define DDPSPAWN_CORE_TRAIN_LOGGERS_TENSORBOARD_LOGGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/train/loggers/metric_logger.h"

namespace ddpspawn {

// One TFRecord: length, its masked CRC-32C, the data, its masked CRC-32C.
std::string TfRecord(absl::string_view data);

// A new event file, events.out.tfevents.<seconds>.<host>.<pid>.<n>, in `dir` (made if missing),
// created exclusively and never through a link; its first record says the file's version. Each
// metric is a scalar under its name at its step; the hyperparameters are the HParams plugin's
// session start (a number where the text is one, true/false a bool, else text).
absl::StatusOr<std::unique_ptr<MetricLogger>> MakeTensorBoardLogger(const std::string& dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOGGERS_TENSORBOARD_LOGGER_H_
