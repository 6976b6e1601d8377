// Run(): parse, check, launch with restarts, report (see run.h).
#include "core/train/run/run.h"

#include "core/env/cluster_environment.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/run/export.h"
#include "core/train/run/restarts.h"
#include "core/train/run/run_checks.h"
#include "core/train/run/run_command.h"

namespace ddpspawn {
namespace {

absl::Status Refused(RunReport* report, const absl::Status& why) {
  report->refused = true;
  return absl::InvalidArgumentError(why.message());
}

}  // namespace

absl::Status Run(const std::string& command, const RunOptions& options, RunReport* report) {
  *report = RunReport{};
  if (command == "export") {  // in this process: no ranks
    absl::StatusOr<std::string> exported = RunExport(options);
    if (!exported.ok()) return Refused(report, exported.status());
    report->result = *std::move(exported);
    return absl::OkStatus();
  }
  // The environment is read once: for the options and for how a failure ends.
  const RunEnvironment environment = ThisProcessEnvironment();
  absl::StatusOr<RunConfig> config = ParseRunOptions(command, options);
  if (config.ok()) {
    if (absl::Status resolved = ResolveRunConfig(*config, environment); !resolved.ok()) {
      config = resolved;
    }
  }
  if (!config.ok()) return Refused(report, config.status());
  DDPSpawnStrategy strategy(StrategyOptionsFor(*config));
  auto run = [&config](DDPSpawnStrategy& s) { return RunCommand(*config, s); };
  // A rank that spawn or a forkserver started runs this same command line again; fork's ranks never
  // come back here.
  if (config->start_method != StartMethod::kFork && IsWorkerProcess()) {
    report->worker_exit_code = strategy.RunWorker(run);
    return absl::OkStatus();
  }
  if (absl::Status checked = CheckRun(*config); !checked.ok()) return Refused(report, checked);
  report->outer_rank = environment.outer.ok() && CreatesProcessesExternally(*environment.outer);
  absl::StatusOr<std::string> result = LaunchWithRestarts(*config, strategy, run);
  report->failed_rank = strategy.last_failed_rank();
  report->outcomes = strategy.last_outcomes();
  report->prints_result = strategy.is_global_zero();
  if (!result.ok()) return result.status();
  report->result = *std::move(result);
  return absl::OkStatus();
}

}  // namespace ddpspawn
