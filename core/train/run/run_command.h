// The command of a run (fit, validate, test or predict) inside one rank, and the strategy options a
// run's ranks are launched with.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_COMMAND_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/run/run_options.h"

namespace ddpspawn {

// In a rank whose strategy has joined the group: runs the command; rank 0's return value is the
// result text (FitResult::Encode() lines; predict adds predictions=<csv>).
absl::StatusOr<std::string> RunCommand(const RunConfig& config, DDPSpawnStrategy& strategy);

StrategyOptions StrategyOptionsFor(const RunConfig& config);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_COMMAND_H_
