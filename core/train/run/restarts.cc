// Restarting a run's ranks when one fails (see restarts.h).
#include "core/train/run/restarts.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/env/settings.h"
#include "core/job/restart_policy.h"
#include "core/launch/launcher.h"
#include "core/model/checkpoint.h"
#include "core/model/sharded_checkpoint.h"
#include "core/train/loop/checkpoint_connector.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

namespace {

// When `path` was last written; nullopt when it does not exist.
std::optional<absl::Time> ModifiedAt(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return std::nullopt;
  return absl::TimeFromTimespec(info.st_mtim);
}

// Where training stands in the checkpoint at `path` (a file through the strategy's CheckpointIO, or
// a sharded checkpoint's directory).
absl::StatusOr<TrainingState> ReadResumePoint(DDPSpawnStrategy& strategy, const std::string& path) {
  if (IsShardedCheckpoint(path)) {
    ASSIGN_OR_RETURN(std::string extra, ReadShardedCheckpointExtra(path));
    return ParseTrainingState(extra);
  }
  ASSIGN_OR_RETURN(std::string bytes, strategy.LoadCheckpoint(path));
  return ReadCheckpointTrainingState(bytes);
}

}  // namespace

absl::StatusOr<std::string> LaunchWithRestarts(const RunConfig& config, DDPSpawnStrategy& strategy,
                                               const DDPSpawnStrategy::WorkerFn& fn) {
  const absl::Time started = absl::Now();
  const std::string checkpoint = LastCheckpointPath(config.trainer);
  std::string result;
  RestartSteps steps;
  steps.run_attempt = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(result, strategy.Launch(fn));
    return absl::OkStatus();
  };
  steps.decline = [&](const std::string& why) { strategy.DeclineRestart(why); };
  // This job's own checkpoint, if it wrote one; else where it started. With several nodes, node 0's
  // choice (rank 0 writes the checkpoints there).
  steps.agree_resume_point = [&]() {
    std::optional<absl::Time> written = ModifiedAt(checkpoint);
    return strategy.PrepareRestart(written.has_value() && *written >= started
                                       ? std::filesystem::absolute(checkpoint).string()
                                       : config.trainer.resume_from);
  };
  steps.prepare_next = [&](const std::string& resume_point) {
    std::vector<std::string> env;
    if (!resume_point.empty())
      env.push_back(absl::StrCat(SettingName(Setting::kResumeFrom), "=", resume_point));
    strategy.set_worker_env(std::move(env));
    return absl::OkStatus();
  };
  steps.empty_resume_point_reads_as = "the start (no checkpoint yet)";
  int64_t resumed_step = 0;  // the last restart's
  int64_t steps_rerun = 0;   // the steps the failed attempt finished after it, which run again
  steps.describe_resume_point = [&](const std::string& resume_point) -> std::string {
    resumed_step = 0;
    int64_t reached = -1;  // the furthest step a rank of the failed attempt said it finished
    for (const RankOutcome& outcome : strategy.last_outcomes()) {
      reached = std::max(reached, outcome.progress);
    }
    std::string where;
    if (!resume_point.empty()) {
      absl::StatusOr<TrainingState> state = ReadResumePoint(strategy, resume_point);
      if (!state.ok()) return "";  // the restarted ranks say what is wrong with it
      resumed_step = state->global_step;
      where =
          state->batch_in_epoch == 0
              ? absl::StrCat("step ", state->global_step, ", the start of epoch ", state->epoch + 1)
              : absl::StrCat("step ", state->global_step, ", batch ", state->batch_in_epoch,
                             " of epoch ", state->epoch + 1);
    }
    steps_rerun = std::max<int64_t>(reached - resumed_step, 0);
    if (reached < 0) return where;  // no step was reported (none finished, or not fit)
    return absl::StrCat(where, where.empty() ? "" : "; ", steps_rerun,
                        steps_rerun == 1 ? " step" : " steps",
                        " re-run: the failed attempt reached step ", reached);
  };
  int restarts = 0;
  // An elastic fit's max_restarts starts lost ranks again within the job (StrategyOptions).
  const int max_restarts = config.min_ranks > 0 ? 0 : config.max_restarts;
  RETURN_IF_ERROR(RunWithRestarts(steps, max_restarts, restarts));
  if (max_restarts == 0) return result;
  return absl::StrCat(result, "restarts=", restarts, "\n",
                      restarts > 0 ? absl::StrCat("resumed_step=", resumed_step,
                                                  "\nsteps_rerun=", steps_rerun, "\n")
                                   : "");
}

}  // namespace ddpspawn
