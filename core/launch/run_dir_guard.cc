// The run directory's guardian process (see run_dir_guard.h). The child is forked from a launcher
// that may have many threads (LibTorch's, Python's), so it uses plain system calls only: no
// allocation, no locks.
#include "core/launch/run_dir_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/env/run_dir.h"
#include "core/launch/child_process.h"

namespace ddpspawn {
namespace {

// Unlinks the entries of `directory` whose names start with `prefix` (every entry for an empty
// prefix). Passes again until one removes nothing, since a listing that changes under getdents may
// skip entries.
void UnlinkEntries(const char* directory, const char* prefix) {
  const size_t prefix_length = std::strlen(prefix);
  for (bool removed = true; removed;) {
    removed = false;
    const int fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ForEachDirectoryEntry(fd, [&](const char* name) {
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0 ||
          std::strncmp(name, prefix, prefix_length) != 0) {
        return;
      }
      removed = unlinkat(fd, name, 0) == 0 || removed;
    });
    close(fd);
  }
}

// Kills (SIGKILL) each process group whose id the launcher appended to `path`
// (RunDirGuard::AddProcessGroup). Its leader, a rank, has died with the launcher a moment before; a
// group left with members keeps its id, an empty one is not there to kill (its id is not reused
// within that moment).
void KillProcessGroups(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  pid_t groups[256];
  for (ssize_t n; (n = read(fd, groups, sizeof groups)) > 0;) {
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(pid_t); ++i) {
      if (groups[i] > 1) kill(-groups[i], SIGKILL);
    }
  }
  close(fd);
}

[[noreturn]] void GuardianMain(pid_t launcher, const char* run_dir, const char* shm_prefix,
                               const char* groups_file) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // Hold nothing of the launcher's open: a pipe kept open here would keep its reader waiting after
  // the launcher ends.
  const int null = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3 && null >= 0; ++fd) dup2(null, fd);
  syscall(SYS_close_range, 3U, ~0U, 0U);
  if (getppid() == launcher) {  // else the launcher is already gone
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    while (sigwaitinfo(&term, nullptr) < 0 && errno == EINTR) {
    }
  }
  // Stop()'s SIGTERM comes from a living launcher; PR_SET_PDEATHSIG's comes after this process was
  // handed to another parent.
  if (getppid() != launcher) KillProcessGroups(groups_file);
  UnlinkEntries(run_dir, "");
  rmdir(run_dir);
  UnlinkEntries("/dev/shm", shm_prefix);
  _exit(0);
}

}  // namespace

RunDirGuard::RunDirGuard(RunDirGuard&& other) noexcept
    : pid_(other.pid_), groups_file_(std::move(other.groups_file_)) {
  other.pid_ = -1;
}

RunDirGuard& RunDirGuard::operator=(RunDirGuard&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = other.pid_;
    groups_file_ = std::move(other.groups_file_);
    other.pid_ = -1;
  }
  return *this;
}

absl::StatusOr<RunDirGuard> RunDirGuard::Start(const std::string& run_dir,
                                               const std::string& shm_prefix) {
  const pid_t launcher = getpid();
  std::string groups_file = RunDirProcessGroupsFile(run_dir);
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start the run directory's guardian: ", std::strerror(errno)));
  }
  if (pid == 0) GuardianMain(launcher, run_dir.c_str(), shm_prefix.c_str(), groups_file.c_str());
  RunDirGuard guard;
  guard.pid_ = pid;
  guard.groups_file_ = std::move(groups_file);
  return guard;
}

absl::Status RunDirGuard::AddProcessGroup(pid_t pgid) {
  if (pid_ <= 0) {
    return absl::FailedPreconditionError("the run directory's guardian is not running");
  }
  const int fd = open(groups_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot record process group ", pgid, " in ",
                                            groups_file_, ": ", std::strerror(errno)));
  }
  ssize_t written;
  do {
    written = write(fd, &pgid, sizeof pgid);
  } while (written < 0 && errno == EINTR);
  const int saved = errno;
  close(fd);
  if (written != static_cast<ssize_t>(sizeof pgid)) {
    return absl::InternalError(absl::StrCat("cannot record process group ", pgid, " in ",
                                            groups_file_, ": ",
                                            written < 0 ? std::strerror(saved) : "short write"));
  }
  return absl::OkStatus();
}

void RunDirGuard::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace ddpspawn
