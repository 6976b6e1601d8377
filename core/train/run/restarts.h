// Restarting a run's ranks when one fails (torchrun's --max-restarts), from the checkpoint the job
// wrote last.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RESTARTS_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RESTARTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/run/run_options.h"

namespace ddpspawn {

// In the launching process: strategy.Launch(fn), and when a rank fails, again (config.max_restarts
// times at most), the new ranks continuing from the checkpoint this job wrote last (or from where
// it started, if it wrote none). Each restart is announced on stderr with its cause and the step it
// continues from; the result ends with "restarts=N" and, after a restart, "resumed_step=S" (the
// last restart's).
absl::StatusOr<std::string> LaunchWithRestarts(const RunConfig& config, DDPSpawnStrategy& strategy,
                                               const DDPSpawnStrategy::WorkerFn& fn);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RESTARTS_H_
