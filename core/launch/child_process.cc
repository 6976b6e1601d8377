// Steps in a freshly forked child (see child_process.h).
#include "core/launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ddpspawn {
namespace {

struct LinuxDirent64 {  // what getdents64 returns
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

}  // namespace

std::vector<char*> CStringArray(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void PrepareChild(pid_t parent, bool reset_signals) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the launcher died before prctl
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (reset_signals) {
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGUSR1, SIGUSR2})
      signal(sig, SIG_DFL);
  }
}

void ForEachDirectoryEntry(int dir, absl::FunctionRef<void(const char* name)> visit) {
  alignas(LinuxDirent64) char buffer[4096];
  for (long n; (n = syscall(SYS_getdents64, dir, buffer, sizeof buffer)) > 0;) {
    for (long offset = 0; offset < n;) {
      const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + offset);
      offset += entry->d_reclen;
      visit(entry->d_name);
    }
  }
}

void CloseDescriptorsAbove2(int keep) {
  auto close_span = [](unsigned first, unsigned last) {
    return first > last || close_range(first, last, 0) == 0;
  };
  const bool closed = keep < 3 ? close_span(3, ~0U)
                               : close_span(3, static_cast<unsigned>(keep) - 1) &&
                                     close_span(static_cast<unsigned>(keep) + 1, ~0U);
  if (closed) return;
  // Kernels before 5.9 lack close_range: close what /proc/self/fd lists, again until a pass finds
  // nothing (closing changes the listing under getdents).
  bool listed = false;
  for (bool found = true; found;) {
    found = false;
    const int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) break;
    listed = true;
    ForEachDirectoryEntry(dir, [&](const char* name) {
      int fd = 0;
      const char* c = name;
      for (; *c >= '0' && *c <= '9' && fd < (1 << 27); ++c) fd = fd * 10 + (*c - '0');
      if (c == name || *c != '\0' || fd < 3 || fd == keep || fd == dir) return;
      found = close(fd) == 0 || found;
    });
    close(dir);
  }
  if (listed) return;
  // Without /proc: every number below the descriptor limit.
  struct rlimit limit = {};
  const rlim_t end = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                         ? limit.rlim_cur
                         : 65536;
  for (rlim_t fd = 3; fd < end; ++fd) {
    if (static_cast<int>(fd) != keep) close(static_cast<int>(fd));
  }
}

}  // namespace ddpspawn
