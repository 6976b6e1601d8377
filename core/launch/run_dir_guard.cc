// The run directory's guardian process (see run_dir_guard.h). The child is
// forked from a launcher that may have many threads (LibTorch's, Python's), so
// it uses plain system calls only: no allocation, no locks.
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

#include "absl/strings/str_cat.h"

namespace ddpspawn {
namespace {

struct LinuxDirent64 {  // what getdents64 returns
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Unlinks the entries of `directory` whose names start with `prefix` (every
// entry for an empty prefix). Passes again until one removes nothing, since a
// listing that changes under getdents may skip entries.
void UnlinkEntries(const char* directory, const char* prefix) {
  const size_t prefix_length = std::strlen(prefix);
  for (bool removed = true; removed;) {
    removed = false;
    const int fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    alignas(LinuxDirent64) char buffer[4096];
    for (long n; (n = syscall(SYS_getdents64, fd, buffer, sizeof buffer)) > 0;) {
      for (long offset = 0; offset < n;) {
        const auto* entry = reinterpret_cast<LinuxDirent64*>(buffer + offset);
        offset += entry->d_reclen;
        const char* name = entry->d_name;
        if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0 ||
            std::strncmp(name, prefix, prefix_length) != 0) {
          continue;
        }
        removed = unlinkat(fd, name, 0) == 0 || removed;
      }
    }
    close(fd);
  }
}

[[noreturn]] void GuardianMain(pid_t launcher, const char* run_dir, const char* shm_prefix) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // Hold nothing of the launcher's open: a pipe kept open here would keep its
  // reader waiting after the launcher ends.
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
  UnlinkEntries(run_dir, "");
  rmdir(run_dir);
  UnlinkEntries("/dev/shm", shm_prefix);
  _exit(0);
}

}  // namespace

RunDirGuard::RunDirGuard(RunDirGuard&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

RunDirGuard& RunDirGuard::operator=(RunDirGuard&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

absl::StatusOr<RunDirGuard> RunDirGuard::Start(const std::string& run_dir,
                                               const std::string& shm_prefix) {
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start the run directory's guardian: ", std::strerror(errno)));
  }
  if (pid == 0) GuardianMain(launcher, run_dir.c_str(), shm_prefix.c_str());
  RunDirGuard guard;
  guard.pid_ = pid;
  return guard;
}

void RunDirGuard::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace ddpspawn
