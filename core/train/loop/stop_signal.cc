// The stop signal's handler and the stop request agreed across ranks (see stop_signal.h).
#include "core/train/loop/stop_signal.h"

#include <ATen/ATen.h>
#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// The signal TrainerOptions::checkpoint_on_signal names, once received.
volatile sig_atomic_t g_stop_signal_received = 0;

void RecordStopSignal(int /*sig*/) { g_stop_signal_received = 1; }

}  // namespace

std::string SignalAbbrev(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return absl::StrCat("SIG", abbrev != nullptr ? abbrev : std::to_string(sig));
}

StopSignal::StopSignal(int sig) : sig_(sig) {
  g_stop_signal_received = 0;
  if (sig_ == 0) return;
  struct sigaction action = {};
  action.sa_handler = RecordStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(sig_, &action, &old_);
}

StopSignal::~StopSignal() {
  if (sig_ != 0) sigaction(sig_, &old_, nullptr);
}

absl::StatusOr<StopRequest> StopRequestedOnAnyRank(DDPSpawnStrategy& strategy,
                                                   absl::Time deadline) {
  const std::vector<double> mine = {absl::Now() >= deadline ? 1.0 : 0.0,
                                    g_stop_signal_received != 0 ? 1.0 : 0.0};
  ASSIGN_OR_RETURN(at::Tensor any, strategy.Reduce(at::tensor(mine, at::kDouble), ReduceOp::kMax));
  at::Tensor on_cpu = any.to(at::kCPU);
  return StopRequest{on_cpu[0].item<double>() > 0, on_cpu[1].item<double>() > 0};
}

}  // namespace ddpspawn
