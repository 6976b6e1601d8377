// torchrun's --max-restarts, for any launcher of a job (the run pipeline's LaunchWithRestarts, the
// C ABI's ddpspawn_job): the one restart loop, which ends of a start it retries, what the other
// nodes are told when it does not, and how the last failure reads after restarts.
#ifndef DDPSPAWN_CORE_JOB_RESTART_POLICY_H_
#define DDPSPAWN_CORE_JOB_RESTART_POLICY_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// What RunWithRestarts does to one job; each step runs on the caller's thread. Plain values (the
// functions are the caller's).
struct RestartSteps {
  // Runs the attempt under way (or starts and runs it) to its end.
  std::function<absl::Status()> run_attempt;
  // Not restarting: tells the other nodes' launchers why, so that they stop waiting for this one
  // (NodeJob::DeclineRestart).
  std::function<void(const std::string& why)> decline;
  // The point the next attempt continues from, agreed by every node (NodeJob::PrepareRestart);
  // empty: the start, or the program's own state.
  std::function<absl::StatusOr<std::string>()> agree_resume_point;
  // Readies the next attempt to continue from the agreed point.
  std::function<absl::Status(const std::string& resume_point)> prepare_next;
  // How the restart's announcement names an empty resume point ("" names nothing).
  std::string empty_resume_point_reads_as;
  // Where training stands at a resume point (say, its step), for the announcement; "" (or no
  // function): nothing to add.
  std::function<std::string(const std::string& resume_point)> describe_resume_point;
};

// Runs attempts of a job until one ends Ok or a failure is not retried: only a failed rank
// (Aborted) is, `max_restarts` times at most (`restarts`, in and out, counts them), not an
// interrupt, a timeout of the whole job or a refusal before any rank ran. Each restart is announced
// on stderr ("ddpspawn: restart K of N: <the failure's first line>", then "ddpspawn: continuing
// from <the point> (<where training stands there>)"). The last failure's message ends "(after N
// restarts)" when there were any.
absl::Status RunWithRestarts(const RestartSteps& steps, int max_restarts, int& restarts);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_JOB_RESTART_POLICY_H_
