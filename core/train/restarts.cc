// Restarting a run's ranks when one fails (see restarts.h).
#include "core/train/restarts.h"

#include <sys/stat.h>

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
#include "core/train/checkpoint_connector.h"

namespace ddpspawn {

namespace {

// When `path` was last written; nullopt when it does not exist.
std::optional<absl::Time> ModifiedAt(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return std::nullopt;
  return absl::TimeFromTimespec(info.st_mtim);
}

}  // namespace

absl::StatusOr<std::string> LaunchWithRestarts(const RunConfig& config, DDPSpawnStrategy& strategy,
                                               const DDPSpawnStrategy::WorkerFn& fn) {
  const absl::Time started = absl::Now();
  const std::string checkpoint = LastCheckpointPath(config.trainer);
  for (int restarts = 0;; ++restarts) {
    absl::StatusOr<std::string> result = strategy.Launch(fn);
    if (result.ok()) {
      if (config.max_restarts == 0) return result;
      return absl::StrCat(*result, "restarts=", restarts, "\n");
    }
    const absl::Status& failed = result.status();
    const RestartDecision decision = DecideRestart(failed, restarts, config.max_restarts);
    if (!decision.restart) {
      // The other nodes' launchers, if any, stop waiting for this one.
      strategy.DeclineRestart(decision.declined_because);
      return AfterRestarts(failed, restarts);
    }
    // This job's own checkpoint, if it wrote one; else where it started. With
    // several nodes, node 0's choice (rank 0 writes the checkpoints there).
    std::optional<absl::Time> written = ModifiedAt(checkpoint);
    absl::StatusOr<std::string> resume = strategy.PrepareRestart(
        written.has_value() && *written >= started ? std::filesystem::absolute(checkpoint).string()
                                                   : config.trainer.resume_from);
    if (!resume.ok()) {
      const absl::Status after = AfterRestarts(failed, restarts);
      return absl::Status(
          failed.code(),
          absl::StrCat(after.message(), "\nnot restarted: ", resume.status().message()));
    }
    AnnounceRestart(restarts + 1, config.max_restarts, failed,
                    resume->empty() ? "the start (no checkpoint yet)" : *resume);
    std::vector<std::string> env;
    if (!resume->empty())
      env.push_back(absl::StrCat(SettingName(Setting::kResumeFrom), "=", *resume));
    strategy.set_worker_env(std::move(env));
  }
}

}  // namespace ddpspawn
