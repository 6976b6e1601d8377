// ddpspawn's own environment variables: the one table of their names, values and meanings, and the
// one place that reads them. docs/ARCHITECTURE.md's "Environment settings" table lists the same
// names (//tests/core:settings_test checks it). Variables of other tools (torchrun's RANK, SLURM's,
// GLOO_SOCKET_IFNAME) are read where they are interpreted: cluster_environment.h, the process
// group.
//
// Thread-safety: the functions read the process environment and may run concurrently with each
// other, not with setenv/unsetenv (as getenv).
#ifndef DDPSPAWN_CORE_ENV_SETTINGS_H_
#define DDPSPAWN_CORE_ENV_SETTINGS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ddpspawn {

// The launcher's private run directory, set in every worker it starts (and only there).
inline constexpr char kRunDirEnv[] = "DDPSPAWN_RUN_DIR";

enum class Setting {
  kRunDir,        // DDPSPAWN_RUN_DIR
  kShmAllReduce,  // DDPSPAWN_SHM_ALLREDUCE
  kDebug,         // DDPSPAWN_DEBUG
  kResumeFrom,    // DDPSPAWN_RESUME_FROM
  kCudaLibrary,   // DDPSPAWN_CUDA_LIBRARY
  kElasticJoin,   // DDPSPAWN_ELASTIC_JOIN
};

struct SettingInfo {
  Setting setting;
  const char* name;     // the variable
  const char* values;   // what it accepts
  const char* meaning;  // one line for the documentation
};

// Every setting, in the order of the documentation's table.
absl::Span<const SettingInfo> AllSettings();

// The variable's name.
const char* SettingName(Setting setting);

// The variable's value, or nullopt when it is unset.
std::optional<std::string> ReadSetting(Setting setting);

// A 0/1 switch: `unset_value` when unset; anything but "0" or "1" is InvalidArgument naming the
// variable and its value.
absl::StatusOr<bool> ReadSwitch(Setting setting, bool unset_value);

// Whether a ddpspawn launcher started this process (DDPSPAWN_RUN_DIR is set).
bool IsLaunchedWorker();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_ENV_SETTINGS_H_
