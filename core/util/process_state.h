// What the kernel says of a process (/proc/<pid>/stat's state field and start time), for deciding
// whether a peer or a writer is still there, or what came before a process. Thread-safe.
#ifndef DDPSPAWN_CORE_UTIL_PROCESS_STATE_H_
#define DDPSPAWN_CORE_UTIL_PROCESS_STATE_H_

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpspawn {

enum class ProcessState {
  kGone,     // no such process (or /proc cannot say)
  kZombie,   // exited, not reaped yet
  kStopped,  // SIGSTOP, or a debugger
  kBlocked,  // uninterruptible sleep in the kernel
  kRunning,
  kSleeping,  // any other state
};

ProcessState ReadProcessState(pid_t pid);

// When process `pid` started: its start time in /proc/<pid>/stat (clock ticks after boot) after the
// boot, which is now less /proc/uptime: to about a hundredth of a second. NotFound when /proc
// cannot say.
absl::StatusOr<absl::Time> ReadProcessStartTime(pid_t pid);

// Gone or a zombie: it runs no code any more.
inline bool HasExited(ProcessState state) {
  return state == ProcessState::kGone || state == ProcessState::kZombie;
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_PROCESS_STATE_H_
