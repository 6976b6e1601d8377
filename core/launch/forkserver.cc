// The forkserver start method: the server's loop and the launcher's handle (see forkserver.h).
#include "core/launch/forkserver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/launch/child_process.h"

extern char** environ;

namespace ddpspawn {
namespace {

// What the server sends: fixed-size messages.
enum MessageKind : int32_t {
  kReady = 1,       // pid: the server's
  kStarted = 2,     // pid: the rank's, or -1 with value: fork's errno
  kEnded = 3,       // pid: a rank's; value: its wait status
  kExecFailed = 4,  // value: execve's errno (sent by the child that failed to become the server)
};

struct Message {
  int32_t kind = 0;
  int32_t pid = 0;
  int32_t value = 0;
};

// How many servers (of different programs, arguments or environments) a process keeps for later
// launches.
constexpr size_t kMaxSharedServers = 4;

// A request is a 4-byte length, then the working directory and each NAME=value of the environment,
// each ending in '\0'. Larger ones are refused.
constexpr uint32_t kMaxRequestBytes = 16u << 20;

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// poll()'s timeout for `wait`: -1 (none) when infinite, never negative otherwise.
int PollMilliseconds(absl::Duration wait) {
  if (wait == absl::InfiniteDuration()) return -1;
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(wait), 0, 1 << 30));
}

bool Send(int fd, MessageKind kind, pid_t pid, int value) {
  Message message{kind, static_cast<int32_t>(pid), static_cast<int32_t>(value)};
  return WriteAll(fd, &message, sizeof(message));
}

[[noreturn]] void ServerFails(const std::string& why) {
  std::fprintf(stderr, "ddpspawn forkserver: %s\n", why.c_str());
  std::_Exit(2);
}

// The server's ranks: killed with their process groups when the launcher goes.
[[noreturn]] void KillRanksAndExit(const std::vector<pid_t>& ranks) {
  for (pid_t pid : ranks) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  for (pid_t pid : ranks) waitpid(pid, nullptr, 0);
  std::_Exit(0);
}

// An allocation that lives, on purpose, for the rest of the process: told to LeakSanitizer, which
// would report it (at -O2 no pointer to it need stay in memory where the leak check could see one).
template <typename T>
T* NeverFreed(T* object) {
#if defined(__SANITIZE_ADDRESS__)
  __lsan_ignore_object(object);
#endif
  return object;
}

// In the new rank: it leaves the server's loop with the request's environment and working
// directory. `request` stays allocated for the process's life.
void BecomeRank(pid_t server, std::string* request, const sigset_t& old_mask) {
  NeverFreed(request);
  PrepareChild(server, /*reset_signals=*/true);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  // The server's other descriptors stay: what its libraries opened as they loaded is the rank's as
  // much as the server's. Nothing of the launcher's reached the server (its exec kept only the
  // socket).
  std::vector<char*> entries;
  for (size_t begin = 0; begin < request->size();) {
    const size_t end = request->find('\0', begin);
    if (end == std::string::npos) break;
    entries.push_back(request->data() + begin);
    begin = end + 1;
  }
  if (entries.empty() || chdir(entries.front()) != 0) {
    std::fprintf(stderr, "ddpspawn forkserver: a rank cannot enter its working directory: %s\n",
                 std::strerror(errno));
    std::_Exit(1);
  }
  auto* rank_environ = NeverFreed(new std::vector<char*>(entries.begin() + 1, entries.end()));
  rank_environ->push_back(nullptr);
  environ = rank_environ->data();
}

}  // namespace

void ServeForksIfForkserver() {
  const char* fd_text = std::getenv(kForkserverFdEnv);
  if (fd_text == nullptr) return;
  int fd = -1;
  if (!absl::SimpleAtoi(fd_text, &fd) || fd < 0 || fcntl(fd, F_GETFD) < 0) {
    ServerFails(absl::StrCat(kForkserverFdEnv, "='", fd_text, "' is not an open descriptor"));
  }
  unsetenv(kForkserverFdEnv);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  // Terminal and SLURM signals are the launcher's to pass on; the server keeps serving through them
  // (its ranks get the default actions back).
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE}) signal(sig, SIG_IGN);
  sigset_t child_signal, old_mask;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child_signal, &old_mask);
  const int child_fd = signalfd(-1, &child_signal, SFD_CLOEXEC | SFD_NONBLOCK);
  if (child_fd < 0) ServerFails(absl::StrCat("signalfd() failed: ", std::strerror(errno)));
  const pid_t self = getpid();
  if (!Send(fd, kReady, self, 0)) std::_Exit(0);  // the launcher is gone
  std::vector<pid_t> ranks;
  while (true) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {child_fd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      KillRanksAndExit(ranks);
    }
    if (fds[1].revents != 0) {
      signalfd_siginfo info;
      while (read(child_fd, &info, sizeof(info)) > 0) {
      }
      int status = 0;
      for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
        ranks.erase(std::remove(ranks.begin(), ranks.end(), pid), ranks.end());
        if (!Send(fd, kEnded, pid, status)) KillRanksAndExit(ranks);
      }
    }
    if (fds[0].revents == 0) continue;
    uint32_t size = 0;
    if (!ReadAll(fd, &size, sizeof(size)) || size > kMaxRequestBytes) KillRanksAndExit(ranks);
    auto* request = new std::string(size, '\0');
    if (!ReadAll(fd, request->data(), size)) KillRanksAndExit(ranks);
    std::fflush(nullptr);  // a rank must not print the server's buffered output again
    const pid_t pid = fork();
    if (pid == 0) {
      close(fd);
      close(child_fd);
      BecomeRank(self, request, old_mask);
      return;  // into the program's main(), as this rank
    }
    const int fork_errno = errno;
    delete request;
    if (pid > 0) {
      setpgid(pid, pid);
      ranks.push_back(pid);
    }
    if (!Send(fd, kStarted, pid > 0 ? pid : -1, pid > 0 ? 0 : fork_errno)) KillRanksAndExit(ranks);
  }
}

absl::StatusOr<std::shared_ptr<Forkserver>> Forkserver::Shared(const std::string& program,
                                                               const std::vector<std::string>& argv,
                                                               const std::vector<std::string>& env,
                                                               absl::Duration ready_timeout) {
  static absl::Mutex mu(absl::kConstInit);
  // Never destroyed: the servers die with this process. The most recently used last.
  static auto* servers = new std::vector<std::shared_ptr<Forkserver>>();
  static pid_t owner = 0;  // the process whose servers these are
  // A server dies with the thread that started it (PR_SET_PDEATHSIG), so only that thread's
  // launches share it: another's job would die with a thread it does not know.
  std::string key = absl::StrCat(program, "\n", absl::StrJoin(argv, "\1"), "\n",
                                 absl::StrJoin(env, "\1"), "\n", gettid());
  absl::MutexLock lock(&mu);
  if (owner != getpid()) {
    // Copies of another process's handles, inherited through fork: using or closing them would
    // disturb that process's servers. Left alone, for good.
    NeverFreed(new std::vector<std::shared_ptr<Forkserver>>(std::move(*servers)));
    servers->clear();
    owner = getpid();
  }
  auto same = std::find_if(servers->begin(), servers->end(),
                           [&key](const std::shared_ptr<Forkserver>& s) { return s->key_ == key; });
  if (same != servers->end()) {
    std::shared_ptr<Forkserver> server = std::move(*same);
    servers->erase(same);  // a dead one is replaced; a live one moves to the end
    if (server->alive()) return servers->emplace_back(std::move(server));
  }
  absl::StatusOr<std::unique_ptr<Forkserver>> started =
      Start(program, argv, env, ready_timeout, std::move(key));
  if (!started.ok()) return started.status();
  std::shared_ptr<Forkserver> server(std::move(*started));
  servers->push_back(server);
  // The least recently used goes; its jobs keep their handle.
  if (servers->size() > kMaxSharedServers) servers->erase(servers->begin());
  return server;
}

absl::StatusOr<std::unique_ptr<Forkserver>> Forkserver::Start(const std::string& program,
                                                              const std::vector<std::string>& argv,
                                                              const std::vector<std::string>& env,
                                                              absl::Duration ready_timeout,
                                                              std::string key) {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return absl::InternalError(absl::StrCat("socketpair() failed: ", std::strerror(errno)));
  }
  std::vector<std::string> server_env = env;
  server_env.push_back(absl::StrCat(kForkserverFdEnv, "=3"));
  std::vector<char*> envp = CStringArray(server_env);
  std::vector<char*> args = CStringArray(argv);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    PrepareChild(parent, /*reset_signals=*/true);
    CloseDescriptorsAbove2(/*keep=*/sockets[1]);
    if (sockets[1] != 3) {
      dup2(sockets[1], 3);  // dup2 leaves the copy open across exec
      close(sockets[1]);
    } else {
      fcntl(3, F_SETFD, 0);
    }
    execve(program.c_str(), args.data(), envp.data());
    Send(3, kExecFailed, 0, errno);
    _exit(127);
  }
  const int fork_errno = errno;
  close(sockets[1]);
  if (pid < 0) {
    close(sockets[0]);
    return absl::InternalError(
        absl::StrCat("fork() for the forkserver failed: ", std::strerror(fork_errno)));
  }
  std::unique_ptr<Forkserver> server(new Forkserver(sockets[0], pid, std::move(key)));
  // Ready, or why not.
  Message message;
  pollfd ready = {sockets[0], POLLIN, 0};
  const absl::Time deadline = absl::Now() + ready_timeout;
  int waited_ms = 0;
  do {
    waited_ms = poll(&ready, 1, PollMilliseconds(deadline - absl::Now()));
  } while (waited_ms < 0 && errno == EINTR);
  if (waited_ms == 1 && ReadAll(sockets[0], &message, sizeof(message)) && message.kind == kReady) {
    return server;
  }
  kill(pid, SIGKILL);  // not serving: whatever it does instead, it stops (and is reaped)
  if (message.kind == kExecFailed) {
    return absl::InvalidArgumentError(absl::StrCat("cannot start the forkserver: exec of '",
                                                   program,
                                                   "' failed: ", std::strerror(message.value)));
  }
  if (waited_ms == 0) {
    return absl::DeadlineExceededError(absl::StrCat("the forkserver ('", program, "', pid ", pid,
                                                    ") was not ready within ",
                                                    absl::FormatDuration(ready_timeout)));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the forkserver ('", program, "', pid ", pid,
      ") ended before it was ready: the program's main() must call "
      "ddpspawn::ServeForksIfForkserver() (C: ddpspawn_serve_forks_if_forkserver(); Rust: "
      "ddpspawn::serve_forks_if_forkserver()) before anything else (see its stderr above)"));
}

Forkserver::Forkserver(int fd, pid_t pid, std::string key)
    : fd_(fd), pid_(pid), key_(std::move(key)) {}

Forkserver::~Forkserver() {
  // shutdown() reaches the server even while a forked child of this process still holds a copy of
  // the descriptor; close() alone would not.
  shutdown(fd_, SHUT_RDWR);
  close(fd_);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

bool Forkserver::ReadMessages(absl::Duration wait) {
  if (gone_) return false;
  pollfd readable = {fd_, POLLIN, 0};
  int timeout_ms = PollMilliseconds(wait);
  while (true) {
    const int ready = poll(&readable, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return true;
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      gone_ = true;
      return false;
    }
    unread_.append(buffer, static_cast<size_t>(n));
    size_t used = 0;
    for (; unread_.size() - used >= sizeof(Message); used += sizeof(Message)) {
      Message message;
      std::memcpy(&message, unread_.data() + used, sizeof(message));
      if (message.kind == kStarted) {
        started_.emplace_back(message.pid, message.pid > 0 ? 0 : message.value);
      } else if (message.kind == kEnded) {
        ended_[message.pid] = message.value;
      }
    }
    unread_.erase(0, used);
    timeout_ms = 0;  // drain what is there, then return
  }
}

bool Forkserver::alive() {
  absl::MutexLock lock(&mu_);
  return ReadMessages(absl::ZeroDuration());
}

absl::StatusOr<pid_t> Forkserver::StartRank(const std::vector<std::string>& env) {
  std::string request;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot read the working directory: ", std::strerror(errno)));
  }
  request.append(cwd).push_back('\0');
  for (const std::string& entry : env) request.append(entry).push_back('\0');
  if (request.size() > kMaxRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a rank's environment is ", request.size(),
                                                   " bytes; the forkserver takes at most ",
                                                   kMaxRequestBytes));
  }
  absl::MutexLock lock(&mu_);
  const uint32_t size = static_cast<uint32_t>(request.size());
  if (gone_ || !WriteAll(fd_, &size, sizeof(size)) ||
      !WriteAll(fd_, request.data(), request.size())) {
    gone_ = true;
    return absl::UnavailableError(
        absl::StrCat("the forkserver (pid ", pid_, ") is gone; it could not start a rank"));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (started_.empty()) {
    if (!ReadMessages(deadline - absl::Now())) {
      return absl::UnavailableError(
          absl::StrCat("the forkserver (pid ", pid_, ") died while starting a rank"));
    }
    if (started_.empty() && absl::Now() >= deadline) {
      // A late answer would be taken for the next request's: this server is done (its ranks die
      // with it).
      gone_ = true;
      kill(pid_, SIGKILL);
      return absl::DeadlineExceededError(
          absl::StrCat("the forkserver (pid ", pid_, ") did not start a rank within 60 s"));
    }
  }
  const auto [pid, fork_errno] = started_.front();
  started_.erase(started_.begin());
  if (pid <= 0) {
    return absl::InternalError(
        absl::StrCat("the forkserver could not fork a rank: ", std::strerror(fork_errno)));
  }
  return pid;
}

std::optional<ForkedRankEnd> Forkserver::TakeEnd(pid_t pid) {
  absl::MutexLock lock(&mu_);
  const bool alive = ReadMessages(absl::ZeroDuration());
  if (auto it = ended_.find(pid); it != ended_.end()) {
    ForkedRankEnd end{it->second, false};
    ended_.erase(it);
    return end;
  }
  if (alive) return std::nullopt;
  // The server's death killed its ranks (PR_SET_PDEATHSIG).
  return ForkedRankEnd{SIGKILL, true};
}

}  // namespace ddpspawn
