// A guardian process for a job's run directory: it removes the directory and
// the job's shared-memory segments if the launcher dies without doing so
// (SIGKILL, a crash), so that no run leaves anything behind in /tmp or
// /dev/shm. Forked when the run directory is made, it waits for the
// launcher's death (PR_SET_PDEATHSIG, which follows the forking thread) or for
// Stop(), removes what is left, and exits.
//
// Not thread-safe: the launcher's one thread owns it. Move-only.
#ifndef DDPSPAWN_CORE_LAUNCH_RUN_DIR_GUARD_H_
#define DDPSPAWN_CORE_LAUNCH_RUN_DIR_GUARD_H_

#include <sys/types.h>

#include <string>

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

  // Forks the guardian of `run_dir` (a directory of plain files) and of the
  // files in /dev/shm whose names start with `shm_prefix`.
  static absl::StatusOr<RunDirGuard> Start(const std::string& run_dir,
                                           const std::string& shm_prefix);

  // Has the guardian remove what is left now, and reaps it. Idempotent.
  void Stop();

 private:
  pid_t pid_ = -1;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_RUN_DIR_GUARD_H_
