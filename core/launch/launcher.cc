// Starting, joining and stopping worker processes (see launcher.h).
#include "core/launch/launcher.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <system_error>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/env/cluster_environment.h"
#include "core/env/run_dir.h"
#include "core/launch/child_process.h"
#include "core/launch/forkserver.h"
#include "core/launch/worker_channel.h"
#include "core/trace/flight_recorder.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

extern char** environ;

namespace ddpspawn {
namespace {

// Variables the launcher sets for each rank; the caller's `env` may not set them.
constexpr const char* kContractVariables[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                              "RANK",        "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                              "NODE_RANK",   "GROUP_RANK",  kRunDirEnv};

bool IsContractVariable(absl::string_view name) {
  for (const char* reserved : kContractVariables) {
    if (name == reserved) return true;
  }
  return false;
}

// The launcher's environment without the contract's variables and without the variables `overrides`
// (NAME=value entries) sets again: a process's getenv finds a name's first entry, which must be the
// override.
std::vector<std::string> InheritedEnvironment(const std::vector<std::string>& overrides) {
  std::set<std::string, std::less<>> overridden;
  for (const std::string& entry : overrides) overridden.insert(entry.substr(0, entry.find('=')));
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    absl::string_view text(*entry);
    const absl::string_view name = text.substr(0, text.find('='));
    if (!IsContractVariable(name) && overridden.count(name) == 0) env.emplace_back(text);
  }
  return env;
}

constexpr const char* kThreadCountVariables[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"};

bool IsThreadCount(absl::string_view entry) {
  for (const char* name : kThreadCountVariables) {
    if (absl::StartsWith(entry, absl::StrCat(name, "="))) return true;
  }
  return false;
}

// As torchrun does: unless `env` says otherwise, OpenMP and OpenBLAS use one rank's share of the
// cores, not all of them in every rank.
void AddThreadShares(int nprocs, std::vector<std::string>& env) {
  const int share = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / nprocs);
  for (const char* name : kThreadCountVariables) {
    const std::string prefix = absl::StrCat(name, "=");
    bool given = false;
    for (const std::string& entry : env) given = given || absl::StartsWith(entry, prefix);
    if (!given) env.push_back(absl::StrCat(prefix, share));
  }
}

absl::StatusOr<std::string> ResolveProgram(const std::string& program) {
  auto executable = [](const std::string& path) {
    return access(path.c_str(), X_OK) == 0 && !std::filesystem::is_directory(path);
  };
  if (absl::StrContains(program, '/')) {
    if (executable(program)) return program;
    return absl::InvalidArgumentError(
        absl::StrCat("program '", program, "' does not exist or is not executable"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (executable(candidate)) return candidate;
  }
  return absl::InvalidArgumentError(absl::StrCat("program '", program, "' was not found on PATH"));
}

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket() failed: ", std::strerror(errno)));
  }
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int saved = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("cannot find a free port on 127.0.0.1: ", std::strerror(saved)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// A forked rank inherits the launcher's OpenBLAS, already sized for every core; give it this rank's
// share, as the environment does for spawned ranks (OPENBLAS_NUM_THREADS is read only when OpenBLAS
// starts). A no-op without OpenBLAS.
void LimitBlasThreads(int nprocs) {
  using SetThreads = void (*)(int);
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr && nprocs > 0) {
    auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (set != nullptr) set(std::atoi(std::getenv("OPENBLAS_NUM_THREADS")));
  }
}

// The worker's exit code; an exception is recorded as the rank's error.
int RunWorker(const std::function<int(int)>& worker, int rank) {
  try {
    return worker(rank);
  } catch (const std::exception& e) {
    (void)SetWorkerError(absl::StrCat("uncaught C++ exception: ", e.what()));
  } catch (...) {
    (void)SetWorkerError("uncaught C++ exception of a non-std type");
  }
  return 1;
}

// RunWorker on a new thread (see LaunchSpec::fork_worker_thread), which this one waits for.
int RunWorkerOnNewThread(const std::function<int(int)>& worker, int rank) {
  int code = 1;
  try {
    std::thread thread([&] { code = RunWorker(worker, rank); });
    thread.join();
  } catch (const std::system_error& e) {
    (void)SetWorkerError(
        absl::StrCat("rank ", rank, " could not start the thread its worker runs on: ", e.what()));
    return 1;
  }
  return code;
}

}  // namespace

constexpr NamedValue<StartMethod> kStartMethodNames[] = {
    {"spawn", StartMethod::kSpawn},
    {"fork", StartMethod::kFork},
    {"forkserver", StartMethod::kForkserver},
};

absl::string_view StartMethodName(StartMethod method) { return NameOf(kStartMethodNames, method); }

absl::StatusOr<StartMethod> ParseStartMethod(absl::string_view name) {
  return ParseName(kStartMethodNames, "start method", name);
}

Job::Job(LaunchSpec spec) : spec_(std::move(spec)), outcomes_(static_cast<size_t>(spec_.nprocs)) {}

Job::~Job() {
  for (RankOutcome& outcome : outcomes_) KillAndReap(outcome);
  RemoveRunDir();
}

absl::StatusOr<std::unique_ptr<Job>> Job::Create(LaunchSpec spec) {
  if (spec.nprocs < 1 || spec.nprocs > kMaxNprocs) {
    return absl::InvalidArgumentError(
        absl::StrCat("nprocs must be between 1 and ", kMaxNprocs, ", got ", spec.nprocs));
  }
  std::string program_path;
  if (spec.start_method != StartMethod::kFork) {
    if (spec.argv.empty() || spec.argv[0].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the ", StartMethodName(spec.start_method),
                                                     " start method needs argv: the program "
                                                     "each rank runs"));
    }
    ASSIGN_OR_RETURN(std::string resolved, ResolveProgram(spec.argv[0]));
    program_path = resolved;
  } else if (!spec.worker) {
    return absl::InvalidArgumentError("the fork start method needs a worker function");
  }
  for (const std::string& entry : spec.env) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry '", entry, "' is not of the form NAME=value"));
    }
    if (IsContractVariable(absl::string_view(entry).substr(0, eq))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment entry '", entry, "' sets a variable the launcher sets for each rank"));
    }
  }
  if (spec.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive (or infinite)");
  }
  if (spec.grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grace period must not be negative");
  }
  if (spec.master_port < 0 || spec.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("master port ", spec.master_port, " is not a TCP port"));
  }
  if (spec.master_addr.empty()) spec.master_addr = "127.0.0.1";
  if (spec.nnodes < 1 || spec.node_rank < 0 || spec.node_rank >= spec.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node rank ", spec.node_rank, " is outside [0, ", spec.nnodes, ")"));
  }
  if (spec.nnodes > std::numeric_limits<int>::max() / spec.nprocs) {
    return absl::InvalidArgumentError(absl::StrCat(spec.nnodes, " nodes of ", spec.nprocs,
                                                   " ranks are more ranks than an int counts"));
  }
  if (spec.nnodes > 1 && spec.master_port == 0) {
    return absl::InvalidArgumentError(
        "a job of several nodes needs the master port where its ranks meet");
  }
  if (spec.min_ranks < 0 || spec.min_ranks > spec.nprocs) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_ranks ", spec.min_ranks, " is outside [0, nprocs=", spec.nprocs, "]"));
  }
  if (spec.min_ranks > 0 && spec.nnodes > 1) {
    return absl::UnimplementedError(
        "min_ranks (elastic membership) is for a job of one node: a job of several nodes cannot "
        "yet go on without one of them");
  }
  if (spec.max_replacements < 0 || (spec.max_replacements > 0 && spec.min_ranks == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_replacements ", spec.max_replacements,
                     " starts lost ranks of an elastic job again: it needs min_ranks > 0"));
  }
  std::unique_ptr<Job> job(new Job(std::move(spec)));
  job->program_path_ = std::move(program_path);
  return job;
}

std::vector<std::string> Job::RankEnvironment(int rank) const {
  std::vector<std::string> env = InheritedEnvironment(spec_.env);
  env.insert(env.end(), spec_.env.begin(), spec_.env.end());
  auto set = [&env](absl::string_view name, auto value) {
    env.push_back(absl::StrCat(name, "=", value));
  };
  set("MASTER_ADDR", spec_.master_addr);
  set("MASTER_PORT", spec_.master_port);
  set("WORLD_SIZE", spec_.nnodes * spec_.nprocs);
  set("RANK", GlobalRank(rank));
  set("LOCAL_RANK", rank);
  set("LOCAL_WORLD_SIZE", spec_.nprocs);
  set("NODE_RANK", spec_.node_rank);
  set("GROUP_RANK", spec_.node_rank);
  set(kRunDirEnv, run_dir_);
  AddThreadShares(spec_.nprocs, env);
  return env;
}

namespace {

std::vector<std::string> ForkserverEnvironment(const LaunchSpec& spec) {
  std::vector<std::string> thread_counts;
  for (const std::string& entry : spec.env) {
    if (IsThreadCount(entry)) thread_counts.push_back(entry);
  }
  std::vector<std::string> env = InheritedEnvironment(thread_counts);
  env.insert(env.end(), thread_counts.begin(), thread_counts.end());
  AddThreadShares(spec.nprocs, env);
  return env;
}

absl::StatusOr<std::shared_ptr<Forkserver>> SharedForkserver(const LaunchSpec& spec,
                                                             const std::string& program) {
  // The server's environment holds what libraries read as they load (the thread counts among it);
  // the rest of LaunchSpec::env goes with each rank's request, so that a restart with a new
  // DDPSPAWN_RESUME_FROM still finds the server ready. Like a spawned rank's exec, the server's
  // start is not the job's time (LaunchSpec::timeout runs from Wait()); loading LibTorch takes
  // about a second, far longer under a sanitizer.
  return Forkserver::Shared(program, spec.argv, ForkserverEnvironment(spec), absl::Minutes(2));
}

}  // namespace

absl::Status Job::PrestartForkserver(const LaunchSpec& spec) {
  if (spec.start_method != StartMethod::kForkserver) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Create(spec));
  return SharedForkserver(job->spec_, job->program_path_).status();
}

absl::Status Job::Start() {
  if (started_) return absl::FailedPreconditionError("the job was already started");
  started_ = true;
  if (std::getenv(kForkserverFdEnv) != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("this process was started as a forkserver (", kForkserverFdEnv,
                     " is set), but its main() launched a job instead of calling "
                     "ddpspawn::ServeForksIfForkserver() first"));
  }
  if (spec_.start_method == StartMethod::kForkserver) {
    ASSIGN_OR_RETURN(forkserver_, SharedForkserver(spec_, program_path_));
  }
  if (spec_.master_port == 0) {
    ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    spec_.master_port = port;
  }
  // A private rendezvous: a 0700 directory only this user can enter.
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = RunDirPattern(tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a run directory ", pattern, ": ", std::strerror(errno)));
  }
  run_dir_ = pattern;
  absl::StatusOr<RunDirGuard> guard = RunDirGuard::Start(run_dir_, SharedMemoryPrefix(run_dir_));
  if (!guard.ok()) {
    RemoveRunDir();
    return guard.status();
  }
  run_dir_guard_ = *std::move(guard);
  std::fflush(nullptr);  // children must not flush the parent's buffered output again
  for (int rank = 0; rank < spec_.nprocs; ++rank) {
    absl::Status started = StartRank(rank, RankEnvironment(rank));
    if (!started.ok()) {
      for (RankOutcome& outcome : outcomes_) KillAndReap(outcome);
      RemoveRunDir();
      return started;
    }
  }
  return absl::OkStatus();
}

namespace {

// Starts a rank through the forkserver `server` and records it as running.
absl::Status StartOnForkserver(Forkserver& server, const std::vector<std::string>& env,
                               int global_rank, RankOutcome& outcome, RunDirGuard& guard) {
  absl::StatusOr<pid_t> pid = server.StartRank(env);
  if (!pid.ok()) {
    return absl::Status(pid.status().code(),
                        absl::StrCat("rank ", global_rank, ": ", pid.status().message()));
  }
  outcome.pid = *pid;
  outcome.state = RankState::kRunning;
  return guard.AddProcessGroup(*pid);
}

// Closes `exec_error_fd` once `pid` has exec'd; a failed exec is reaped, recorded and returned.
absl::Status AwaitExec(pid_t pid, int exec_error_fd, int global_rank, const std::string& program,
                       RankOutcome& outcome) {
  // The pipe closes on a successful exec; otherwise the child sends errno.
  int err = 0;
  ssize_t n;
  do {
    n = read(exec_error_fd, &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(exec_error_fd);
  if (n == sizeof(err)) {
    int status = 0;
    waitpid(pid, &status, 0);
    outcome.state = RankState::kExited;
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 127;
    return absl::InvalidArgumentError(absl::StrCat("rank ", global_rank, " could not exec '",
                                                   program, "': ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Job::StartRank(int rank, const std::vector<std::string>& env) {
  RankOutcome& outcome = outcomes_[rank];
  if (spec_.start_method == StartMethod::kForkserver) {
    return StartOnForkserver(*forkserver_, env, GlobalRank(rank), outcome, run_dir_guard_);
  }
  std::vector<char*> envp = CStringArray(env);
  const pid_t parent = getpid();
  if (spec_.start_method == StartMethod::kFork) {
    if (spec_.fork_hooks.before_fork) spec_.fork_hooks.before_fork();
    pid_t pid = fork();
    if (pid == 0) {
      PrepareChild(parent, /*reset_signals=*/false);
      if (spec_.fork_hooks.after_fork_child) spec_.fork_hooks.after_fork_child();
      if (spec_.fork_close_descriptors) CloseDescriptorsAbove2(/*keep=*/-1);
      environ = envp.data();
      LimitBlasThreads(spec_.nprocs);
      const int code = spec_.fork_worker_thread ? RunWorkerOnNewThread(spec_.worker, rank)
                                                : RunWorker(spec_.worker, rank);
      std::fflush(nullptr);
      _exit(code);
    }
    int fork_errno = errno;
    if (spec_.fork_hooks.after_fork_parent) spec_.fork_hooks.after_fork_parent();
    if (pid < 0) {
      return absl::InternalError(absl::StrCat("fork() for rank ", GlobalRank(rank),
                                              " failed: ", std::strerror(fork_errno)));
    }
    setpgid(pid, pid);
    outcome.pid = pid;
    outcome.state = RankState::kRunning;
    return run_dir_guard_.AddProcessGroup(pid);
  }

  std::vector<char*> argv = CStringArray(spec_.argv);
  int exec_error[2];
  if (pipe2(exec_error, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2() failed: ", std::strerror(errno)));
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(exec_error[0]);
    PrepareChild(parent, /*reset_signals=*/true);
    CloseDescriptorsAbove2(/*keep=*/exec_error[1]);  // close-on-exec itself
    execve(program_path_.c_str(), argv.data(), envp.data());
    int err = errno;
    (void)!write(exec_error[1], &err, sizeof(err));
    _exit(127);
  }
  int fork_errno = errno;
  close(exec_error[1]);
  if (pid < 0) {
    close(exec_error[0]);
    return absl::InternalError(
        absl::StrCat("fork() for rank ", GlobalRank(rank), " failed: ", std::strerror(fork_errno)));
  }
  setpgid(pid, pid);
  outcome.pid = pid;
  outcome.state = RankState::kRunning;
  absl::Status recorded = run_dir_guard_.AddProcessGroup(pid);
  RETURN_IF_ERROR(AwaitExec(pid, exec_error[0], GlobalRank(rank), program_path_, outcome));
  return recorded;
}

}  // namespace ddpspawn
