// The signal on which fit checkpoints and stops (TrainerOptions::checkpoint_on_signal), and the
// stop request (that signal, or max_time) that all ranks agree on after each step.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_STOP_SIGNAL_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_STOP_SIGNAL_H_

#include <signal.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpspawn {

class DDPSpawnStrategy;

// "SIGUSR1" for SIGUSR1 (for a signal without a name: "SIG" and its number).
std::string SignalAbbrev(int sig);

// Handles TrainerOptions::checkpoint_on_signal while alive (fit); restores the previous handler
// after. Nothing for signal 0. Not thread-safe: the handler sets one process-wide flag, which each
// StopSignal clears when made, so one is alive at a time, made and destroyed on the thread that
// runs fit.
class StopSignal {
 public:
  explicit StopSignal(int sig);
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

 private:
  int sig_;
  struct sigaction old_ = {};
};

// Why fit stops early, the same answer on every rank: any rank's clock past `deadline`, or any rank
// got the stop signal.
struct StopRequest {
  bool out_of_time = false;
  bool signaled = false;
};

// One all-reduce (max) of this rank's clock against `deadline` and of whether the live StopSignal
// got its signal: a collective, which every rank calls at the same point.
absl::StatusOr<StopRequest> StopRequestedOnAnyRank(DDPSpawnStrategy& strategy, absl::Time deadline);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_STOP_SIGNAL_H_
