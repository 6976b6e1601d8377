// Run(): the one pipeline behind the ddpspawn CLI and the C ABI's ddpspawn_run. A command with its
// options goes through parsing (run_options.h), the checks made before any rank starts
// (run_checks.h), the launch with restarts (restarts.h) and, in each rank, the command itself
// (run_command.h); "export" runs in this process. The front ends only print what it reports.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/launch/launcher.h"
#include "core/train/run/run_options.h"

namespace ddpspawn {

// What a run tells its front end.
struct RunReport {
  // Rank 0's result as key=value lines (checkpoint=..., metric.val_loss=...), when the run
  // succeeded.
  std::string result;
  // True when the run stopped before any rank started: a bad command or option, an input that fails
  // its check. Run() then returns InvalidArgument, whatever the cause's own code was.
  bool refused = false;
  // This process is one rank of a job that torchrun, srun or the user started (so a failure of any
  // kind is a rank's failure).
  bool outer_rank = false;
  // Whether this process should print `result`: every rank of an outer job gets it, and only its
  // rank 0 prints it.
  bool prints_result = true;
  // Set when this process is a rank that a ddpspawn launcher spawned (or a forkserver forked) for
  // this command line: it ran its part of the job, and exits with this code.
  std::optional<int> worker_exit_code;
  // How this node's ranks ended, and which one's failure ended the job (-1: none failed); empty
  // when none started.
  int failed_rank = -1;
  std::vector<RankOutcome> outcomes;
};

// Runs `command` (fit, validate, test, predict or export) with `options`, and fills `report`.
// Errors: InvalidArgument when refused (see RunReport), else the launch's (Aborted: a rank failed;
// Cancelled: SIGINT or SIGTERM stopped the job; DeadlineExceeded: its time limit passed), naming
// the rank and the cause. In a spawned rank it returns ok and sets worker_exit_code.
absl::Status Run(const std::string& command, const RunOptions& options, RunReport* report);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_H_
