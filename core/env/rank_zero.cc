// Output once per job (see rank_zero.h).
#include "core/env/rank_zero.h"

#include <cstdio>

#include "core/env/settings.h"

namespace ddpspawn {

bool IsRankZero(const EnvLookup& env) {
  absl::StatusOr<ClusterInfo> cluster = DetectClusterEnvironment(env);
  return !cluster.ok() || cluster->rank == 0;
}

bool IsFirstProcessOfJob(const EnvLookup& env) {
  const bool spawned_by_ddpspawn = env(kRunDirEnv).has_value();
  return !spawned_by_ddpspawn && IsRankZero(env);
}

void RankZeroPrint(absl::string_view text) {
  if (!IsRankZero()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace ddpspawn
