// Process states from /proc (see process_state.h).
#include "core/util/process_state.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

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

}  // namespace ddpspawn
