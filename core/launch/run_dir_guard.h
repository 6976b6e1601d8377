// A guardian process for a job's run directory: it removes the directory and the job's
// shared-memory segments if the launcher dies without doing so (SIGKILL, a crash), so that no run
// leaves anything behind in /tmp or /dev/shm, and kills (SIGKILL) the ranks' process groups, so
// that what a rank forked dies with the launcher too (the ranks themselves die by their own
// PR_SET_PDEATHSIG, which their children do not inherit). Forked when the run directory is made, it
// waits for the launcher's death (PR_SET_PDEATHSIG, which follows the forking thread) or for
// Stop(), cleans up, and exits.
//
// Not thread-safe: the launcher's one thread owns it. Move-only. Ownership: it owns the guardian
// process, which Stop() and the destructor reap; a move hands it over.
#ifndef DDPSPAWN_CORE_LAUNCH_RUN_DIR_GUARD_H_
#define DDPSPAWN_CORE_LAUNCH_RUN_DIR_GUARD_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ddpspawn {

class RunDirGuard {
 public:
  RunDirGuard() = default;
  RunDirGuard(RunDirGuard&& other) noexcept;
  RunDirGuard& operator=(RunDirGuard&& other) noexcept;
  RunDirGuard(const RunDirGuard&) = delete;
  RunDirGuard& operator=(const RunDirGuard&) = delete;
  ~RunDirGuard() { Stop(); }

  // Forks the guardian of `run_dir` (a directory of plain files) and of the files in /dev/shm whose
  // names start with `shm_prefix`.
  static absl::StatusOr<RunDirGuard> Start(const std::string& run_dir,
                                           const std::string& shm_prefix);

  // Has the guardian kill process group `pgid` (a rank's, led by the rank) if the launcher dies:
  // the id goes to a file in the run directory, which the guardian reads only then. Stop() forgets
  // them all.
  absl::Status AddProcessGroup(pid_t pgid);

  // Has the guardian remove what is left now, and reaps it; it kills no process group. Idempotent.
  void Stop();

 private:
  pid_t pid_ = -1;
  std::string groups_file_;  // where AddProcessGroup() writes
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_RUN_DIR_GUARD_H_
