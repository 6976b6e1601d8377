// The checks before a run launches: the data, the model and the checkpoints a run names, loaded
// once in the launcher.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_CHECKS_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_CHECKS_H_

#include "absl/status/status.h"
#include "core/train/run/run_options.h"

namespace ddpspawn {

// In the launcher, before any process starts: loads the data and the model once, so that a missing
// or corrupt file, a model without training_step, labels the model cannot use or more ranks than
// samples are reported at once, naming the file.
absl::Status CheckRun(const RunConfig& config);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_CHECKS_H_
