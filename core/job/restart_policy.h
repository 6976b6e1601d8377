// torchrun's --max-restarts, for any launcher of a job (the run pipeline's
// LaunchWithRestarts, the C ABI's ddpspawn_job): which ends of a start a
// restart retries, what the other nodes are told when it does not, and how
// the last failure reads after restarts.
#ifndef DDPSPAWN_CORE_JOB_RESTART_POLICY_H_
#define DDPSPAWN_CORE_JOB_RESTART_POLICY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// Plain values.
struct RestartDecision {
  bool restart = false;
  // When not restarting: why, for NodeJob::DeclineRestart (the other nodes'
  // launchers stop waiting for this one).
  std::string declined_because;
};

// After a start ended with `ended` (not Ok), having restarted `restarts`
// times of `max_restarts`: only a failed rank (Aborted) is retried, not an
// interrupt, a timeout of the whole job or a refusal before any rank ran.
RestartDecision DecideRestart(const absl::Status& ended, int restarts, int max_restarts);

// `ended`, its message followed by "(after N restarts)" when there were any.
absl::Status AfterRestarts(const absl::Status& ended, int restarts);

// On stderr: "ddpspawn: restart K of N: <the failure's first line>", and
// "ddpspawn: continuing from <continuing_from>" when it is not empty.
void AnnounceRestart(int restart, int max_restarts, const absl::Status& ended,
                     absl::string_view continuing_from);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_JOB_RESTART_POLICY_H_
