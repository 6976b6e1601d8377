// ddpspawn's environment settings: the table and the readers (see settings.h).
#include "core/env/settings.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ddpspawn {
namespace {

constexpr SettingInfo kSettings[] = {
    {Setting::kRunDir, kRunDirEnv, "a directory (set by the launcher)",
     "the launcher's private run directory: the rendezvous store, result and error files; marks "
     "the process as a launched worker"},
    {Setting::kShmAllReduce, "DDPSPAWN_SHM_ALLREDUCE", "1 (default) or 0",
     "0 sends every collective through Gloo instead of the launcher's shared-memory path"},
    {Setting::kDebug, "DDPSPAWN_DEBUG", "0 (default) or 1",
     "1 also checks DDP's in-flight all-reduces without shared memory, and NCCL's collectives, "
     "across ranks (debug_checks; the others are always checked)"},
    {Setting::kResumeFrom, "DDPSPAWN_RESUME_FROM", "a checkpoint (set by the launcher)",
     "the checkpoint that restarted ranks (max_restarts) continue from, instead of "
     "resume_from"},
    {Setting::kCudaLibrary, "DDPSPAWN_CUDA_LIBRARY", "a path to libddpspawn_cuda.so",
     "where CUDA support is loaded from when CUDA is asked for (default: beside the library or "
     "program, Bazel's runfiles, then the loader's path)"},
    {Setting::kElasticJoin, "DDPSPAWN_ELASTIC_JOIN", "1 (set by the launcher)",
     "this rank replaces one an elastic fit lost (min_ranks with max_restarts): it joins the "
     "running ranks at their next commit instead of starting with them"},
};

}  // namespace

absl::Span<const SettingInfo> AllSettings() { return kSettings; }

const char* SettingName(Setting setting) {
  for (const SettingInfo& info : kSettings) {
    if (info.setting == setting) return info.name;
  }
  return "";  // unreachable: every Setting has a row
}

std::optional<std::string> ReadSetting(Setting setting) {
  const char* value = std::getenv(SettingName(setting));
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<bool> ReadSwitch(Setting setting, bool unset_value) {
  std::optional<std::string> value = ReadSetting(setting);
  if (!value.has_value()) return unset_value;
  if (*value == "0") return false;
  if (*value == "1") return true;
  return absl::InvalidArgumentError(
      absl::StrCat(SettingName(setting), "='", *value, "': expected 0 or 1"));
}

bool IsLaunchedWorker() { return ReadSetting(Setting::kRunDir).has_value(); }

}  // namespace ddpspawn
