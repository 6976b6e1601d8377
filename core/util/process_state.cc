// Process states from /proc (see process_state.h).
#include "core/util/process_state.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ddpspawn {

ProcessState ReadProcessState(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (pid <= 0 || !std::getline(stat, line)) return ProcessState::kGone;
  // "pid (comm) S ...": the command may hold spaces and parentheses.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return ProcessState::kSleeping;
  switch (line[close + 2]) {
    case 'Z':
    case 'X':
      return ProcessState::kZombie;
    case 'T':
    case 't':
      return ProcessState::kStopped;
    case 'D':
      return ProcessState::kBlocked;
    case 'R':
      return ProcessState::kRunning;
    default:
      return ProcessState::kSleeping;
  }
}

absl::StatusOr<absl::Time> ReadProcessStartTime(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (pid <= 0 || !std::getline(stat, line)) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  const size_t close = line.rfind(')');
  // After "(comm)": the state is field 3, the start time field 22.
  const std::vector<std::string> fields = absl::StrSplit(
      line.substr(close == std::string::npos ? line.size() : close + 1), ' ', absl::SkipEmpty());
  int64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) {
    return absl::NotFoundError(absl::StrCat("/proc/", pid, "/stat has no start time"));
  }
  // The boot time from the uptime (to the hundredth of a second), read right after the clock.
  const absl::Time now = absl::Now();
  std::ifstream uptime_file("/proc/uptime");
  double uptime = -1;
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  if (!(uptime_file >> uptime) || uptime < 0 || ticks_per_second <= 0) {
    return absl::NotFoundError("/proc/uptime cannot be read");
  }
  return now - absl::Seconds(uptime) +
         absl::Seconds(static_cast<double>(ticks) / static_cast<double>(ticks_per_second));
}

}  // namespace ddpspawn
