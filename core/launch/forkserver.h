// The forkserver start method. A server process, started by exec of the worker program (never
// forked from the launcher, so it has none of the launcher's threads, locks or memory), forks the
// ranks on request. A rank gets spawn's isolation at close to fork's cost: the server loaded the
// program and its libraries (LibTorch) once, before any launch asked for ranks.
//
// The worker program's side: main() calls ServeForksIfForkserver() before anything else (in
// particular before anything touches CUDA, which a forked child cannot use after its parent did).
// In the server it never returns; in each rank it returns with the rank's environment and working
// directory; in any other process it returns at once.
//
// The launcher's side: Forkserver::Shared() starts one server per program, arguments, environment
// and launching thread, and a later launch of that thread with the same three reuses it (a restart
// after a failure, the next fit); the four most recently used are kept. A server serves until the
// thread that started it ends (PR_SET_PDEATHSIG; so only that thread's launches share it), and its
// ranks die with it. A server found dead is replaced at the next launch.
//
// Protocol, on a Unix stream socket pair: the launcher sends one request per rank (its working
// directory and environment); the server answers with the rank's pid, and later with the rank's
// wait status when it ends. When the launcher's end closes, the server SIGKILLs its ranks' process
// groups and exits.
#ifndef DDPSPAWN_CORE_LAUNCH_FORKSERVER_H_
#define DDPSPAWN_CORE_LAUNCH_FORKSERVER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ddpspawn {

// Set in the server's environment: the descriptor of its end of the socket.
inline constexpr char kForkserverFdEnv[] = "DDPSPAWN_FORKSERVER_FD";

// See the file comment. Exits the process (code 2, a message on stderr) when this process is a
// forkserver that cannot serve.
void ServeForksIfForkserver();

// How a rank the server started ended.
struct ForkedRankEnd {
  int wait_status = 0;       // as waitpid() reports it
  bool server_died = false;  // the server died first (and took the rank with it)
};

// The launcher's handle on one server. Thread-safe: every member takes the object's mutex, so jobs
// on several threads may share a server. Ownership: it owns its end of the socket and the server
// process (the destructor closes the one and reaps the other); Shared() keeps the four most
// recently used, and each job holds a reference to its own.
class Forkserver {
 public:
  // The running server for `program` run with `argv` (argv[0] included) and `env` (NAME=value, the
  // whole environment) that this thread started, or a new one, started and ready within
  // `ready_timeout`. FailedPrecondition when the program exits or closes the socket before it
  // serves (its main() does not call ServeForksIfForkserver() first).
  static absl::StatusOr<std::shared_ptr<Forkserver>> Shared(const std::string& program,
                                                            const std::vector<std::string>& argv,
                                                            const std::vector<std::string>& env,
                                                            absl::Duration ready_timeout);

  Forkserver(const Forkserver&) = delete;
  Forkserver& operator=(const Forkserver&) = delete;
  // Closes the socket (the server kills its ranks and exits) and reaps it.
  ~Forkserver();

  // Forks a rank with environment `env` in this process's working directory; its pid. The rank is
  // in a process group of its own.
  absl::StatusOr<pid_t> StartRank(const std::vector<std::string>& env);

  // How `pid` (a rank this server started) ended; nullopt while it runs. Does not block.
  std::optional<ForkedRankEnd> TakeEnd(pid_t pid);

  pid_t pid() const { return pid_; }

 private:
  Forkserver(int fd, pid_t pid, std::string key);
  static absl::StatusOr<std::unique_ptr<Forkserver>> Start(const std::string& program,
                                                           const std::vector<std::string>& argv,
                                                           const std::vector<std::string>& env,
                                                           absl::Duration ready_timeout,
                                                           std::string key);
  // Reads what the server sent, waiting up to `wait` for the first message; false once the server
  // is gone.
  bool ReadMessages(absl::Duration wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool alive();

  absl::Mutex mu_;
  const int fd_;
  const pid_t pid_;
  const std::string key_;  // program, argv and env: what a launch must match to share it
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  std::string unread_ ABSL_GUARDED_BY(mu_);                          // a partial message
  std::vector<std::pair<pid_t, int>> started_ ABSL_GUARDED_BY(mu_);  // pid or -errno, in order
  std::map<pid_t, int> ended_ ABSL_GUARDED_BY(mu_);                  // pid: wait status
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_FORKSERVER_H_
