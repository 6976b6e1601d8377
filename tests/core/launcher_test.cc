// Launcher tests with real processes: results, each failure kind in every start method (spawn,
// fork, forkserver; the forkserver's reuse, its death, a program that does not serve) (the reported
// rank and cause, and no process left behind), timeouts, a SIGKILLed launcher (its ranks and their
// children die with it), SIGKILL for a rank that ignores SIGTERM, SIGINT/SIGTERM forwarded to the
// ranks, the descriptors workers inherit, and forked ranks after OpenMP work in the launcher.
#include "core/launch/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/launch/worker_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kWorker[] = "tests/core/test_worker";

bool ProcessGone(pid_t pid) {
  return kill(pid, 0) == -1 && errno == ESRCH && kill(-pid, 0) == -1 && errno == ESRCH;
}

// /proc/<pid>/stat's text; empty once the process is gone. Read with read(2): a process reaped
// between open and read fails the read with ESRCH, which libstdc++'s filebuf turns into an
// exception.
std::string ProcStat(pid_t pid) {
  std::string text;
  const int fd = open(absl::StrCat("/proc/", pid, "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  close(fd);
  return text;
}

// The processes of process group `pgid`, each as its /proc stat line.
std::string DescribeGroup(pid_t pgid) {
  std::string found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::string stat = ProcStat(pid);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    if (fields.size() > 2 && fields[2] == absl::StrCat(pgid))
      absl::StrAppend(&found, "[", stat, "] ");
  }
  return found.empty() ? "no process in its group (a race)" : found;
}

// Gone or dead: a zombie counts, since its reaper may not be this process.
bool ProcessDead(pid_t pid) {
  if (kill(pid, 0) == -1 && errno == ESRCH) return true;
  const std::string text = ProcStat(pid);
  const size_t name_end = text.rfind(')');  // "pid (name) state ..."
  return name_end != std::string::npos && name_end + 2 < text.size() &&
         (text[name_end + 2] == 'Z' || text[name_end + 2] == 'X');
}

// Sends `sig` to this process once Job::Wait() handles it (it installs its handler on entry; before
// that, the default action would end the test).
void SendWhenHandled(int sig) {
  for (struct sigaction current = {};;) {
    sigaction(sig, nullptr, &current);
    if (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  kill(getpid(), sig);
}

// The default action for `sig` while alive, so that ranks forked meanwhile inherit it (a test run
// in the background may start with SIGINT ignored).
class DefaultDisposition {
 public:
  explicit DefaultDisposition(int sig) : sig_(sig) {
    struct sigaction action = {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(sig_, &action, &old_);
  }
  ~DefaultDisposition() { sigaction(sig_, &old_, nullptr); }

 private:
  int sig_;
  struct sigaction old_ = {};
};

void ExpectNoWorkerLeft(const Job& job) {
  for (const RankOutcome& outcome : job.outcomes()) {
    EXPECT_NE(outcome.state, RankState::kRunning);
    EXPECT_GT(outcome.pid, 0) << "a rank never started";
    EXPECT_TRUE(ProcessGone(outcome.pid))
        << "pid " << outcome.pid << " is still there: " << DescribeGroup(outcome.pid);
  }
}

LaunchSpec SpawnSpec(int nprocs, std::vector<std::string> args) {
  LaunchSpec spec;
  spec.nprocs = nprocs;
  spec.argv = {kWorker};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.grace_period = absl::Seconds(1);
  spec.timeout = absl::Seconds(60);
  return spec;
}

LaunchSpec ForkserverSpec(int nprocs, std::vector<std::string> args) {
  LaunchSpec spec = SpawnSpec(nprocs, std::move(args));
  spec.start_method = StartMethod::kForkserver;
  return spec;
}

// The parent's pid of `pid`, from /proc (-1 if gone).
pid_t ParentOf(pid_t pid) {
  const std::string text = ProcStat(pid);
  const size_t name_end = text.rfind(')');  // "pid (name) state ppid ..."
  if (name_end == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(text.substr(name_end + 2), ' ');
  return fields.size() > 1 ? std::atoi(fields[1].c_str()) : -1;
}

LaunchSpec ForkSpec(int nprocs, std::function<int(int)> worker) {
  LaunchSpec spec;
  spec.nprocs = nprocs;
  spec.start_method = StartMethod::kFork;
  spec.worker = std::move(worker);
  spec.grace_period = absl::Seconds(1);
  spec.timeout = absl::Seconds(60);
  return spec;
}

std::unique_ptr<Job> RunJob(LaunchSpec spec, absl::Status* status) {
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(std::move(spec));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  *status = (*job)->Start();
  if (status->ok()) *status = (*job)->Wait();
  return *std::move(job);
}

[[noreturn]] void SleepForever() {
  while (true) pause();
}

TEST(LauncherSpawnTest, ResultComesBackFromRankZero) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(3, {"ok"}), &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(job->result().has_value());
  EXPECT_EQ(*job->result(), "result from rank 0 of 3");
  EXPECT_EQ(job->failed_rank(), -1);
  for (const RankOutcome& outcome : job->outcomes()) {
    EXPECT_EQ(outcome.state, RankState::kExited);
    EXPECT_EQ(outcome.exit_code, 0);
  }
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherSpawnTest, ExceptionNamesRankAndMessage) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(2, {"throw", "1"}), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(job->failed_rank(), 1);
  EXPECT_THAT(status.message(), HasSubstr("rank 1"));
  EXPECT_THAT(status.message(), HasSubstr("deliberate failure in the test worker"));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherSpawnTest, ExitCodeIsReported) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(3, {"exit", "2", "7"}), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(job->failed_rank(), 2);
  EXPECT_THAT(status.message(), HasSubstr("rank 2"));
  EXPECT_THAT(status.message(), HasSubstr("exited with code 7"));
  EXPECT_TRUE(job->outcomes()[0].stopped_by_launcher);
  ExpectNoWorkerLeft(*job);
}

// The rank that failed first is named even when a peer that failed because of it is reaped first
// (its own exit is slower).
TEST(LauncherSpawnTest, TheFirstRankToReportIsTheCauseThoughReapedLast) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(3, {"slow_exit", "0"}), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(job->failed_rank(), 0) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 0"));
  EXPECT_THAT(status.message(), HasSubstr("the failure that ended the job"));
  // Ranks 1 and 2 report that rank 0 failed and exit at once, long before rank 0; one of them may
  // still be stopped by the launcher before it reports (a slow schedule, under a sanitizer), but
  // the first to end had reported.
  int reported = 0;
  for (int rank : {1, 2}) {
    const RankOutcome& outcome = job->outcomes()[rank];
    if (absl::StrContains(outcome.error_text, "rank 0 failed, so this rank stops")) {
      ++reported;
    } else {
      EXPECT_TRUE(outcome.stopped_by_launcher) << "rank " << rank << ": " << outcome.error_text;
    }
  }
  EXPECT_GE(reported, 1);
  EXPECT_FALSE(job->outcomes()[0].stopped_by_launcher);  // it failed before the stop
  ExpectNoWorkerLeft(*job);
}

// A rank that reported its error but was still running when the launcher stopped the job (its exit
// hung) is named by its error, not by the launcher's SIGTERM that ended it.
TEST(LauncherSpawnTest, AReportedErrorHeadsTheMessageThoughTheLauncherEndedTheRank) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(3, {"report_and_hang", "0"}), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  ASSERT_EQ(job->failed_rank(), 0) << status;
  const RankOutcome& failed = job->outcomes()[0];
  EXPECT_EQ(failed.state, RankState::kSignaled);
  EXPECT_EQ(failed.signal, SIGTERM);
  EXPECT_THAT(std::string(status.message()),
              StartsWith(absl::StrCat("rank 0 (pid ", failed.pid,
                                      ") failed: the failure that ended the job\n")));
  EXPECT_THAT(status.message(), HasSubstr("SIGTERM (Terminated) from the launcher ended it"));
  EXPECT_THAT(status.message(), Not(HasSubstr("was killed by signal")));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherSpawnTest, SegfaultIsReportedBySignalName) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(2, {"signal", "0", "11"}), &status);
  EXPECT_EQ(job->failed_rank(), 0);
  EXPECT_THAT(status.message(), HasSubstr("rank 0"));
  EXPECT_THAT(status.message(), HasSubstr("SIGSEGV"));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherSpawnTest, SigkillIsReported) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(SpawnSpec(2, {"signal", "1", "9"}), &status);
  EXPECT_EQ(job->failed_rank(), 1);
  EXPECT_THAT(status.message(), HasSubstr("SIGKILL"));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherSpawnTest, HangingRankHitsTheTimeout) {
  LaunchSpec spec = SpawnSpec(2, {"hang", "1"});
  spec.timeout = absl::Seconds(4);
  absl::Time start = absl::Now();
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(std::move(spec), &status);
  const std::string message(status.message());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  // The hung rank is named. Rank 0 usually ends well inside the limit, but on a loaded machine
  // under a sanitizer it may still be loading LibTorch: then it is named too, and was stopped.
  const bool rank0_still_ran = job->outcomes()[0].stopped_by_launcher;
  EXPECT_THAT(message, HasSubstr(rank0_still_ran ? "ranks still running then: 0, 1 "
                                                 : "ranks still running then: 1 "));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_TRUE(job->outcomes()[1].stopped_by_launcher);
  ExpectNoWorkerLeft(*job);
}

// The job's own limit, reached while ranks wait in a collective for a stopped one: the error adds
// what every rank was last doing (their flight records). The ranks must reach that state before the
// limit; on a loaded machine under a sanitizer they may not within the first limit, so a run in
// which rank 1 had not yet stopped itself is repeated once with a longer one.
TEST(LauncherSpawnTest, TheJobTimeoutSaysWhatEveryRankWasDoing) {
  absl::Status status;
  std::unique_ptr<Job> job;
  std::string message;
  for (absl::Duration limit : {absl::Seconds(8), absl::Seconds(40)}) {
    LaunchSpec spec = SpawnSpec(2, {"stall", "1", "600"});
    spec.timeout = limit;
    job = RunJob(std::move(spec), &status);
    message = std::string(status.message());
    if (absl::StrContains(message, "is stopped")) break;
    ExpectNoWorkerLeft(*job);
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(message, HasSubstr("what every rank was last doing (flight recorder):"));
  EXPECT_THAT(message, HasSubstr("rank 0: last call #3 all_reduce (sum) of 4 float32, "
                                 "running for"));
  EXPECT_THAT(message, HasSubstr("rank 1: never reached call #3"));
  EXPECT_THAT(message, HasSubstr("is stopped"));
  // The stopped rank was continued, so it ended by the SIGTERM, not by a SIGKILL at the grace
  // period's end.
  EXPECT_EQ(job->outcomes()[1].state, RankState::kSignaled);
  EXPECT_EQ(job->outcomes()[1].signal, SIGTERM);
  EXPECT_THAT(message, Not(HasSubstr("grace period")));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherSpawnTest, BadSpecsAreRejectedBeforeAnythingStarts) {
  EXPECT_EQ(Job::Create(SpawnSpec(0, {"ok"})).status().code(), absl::StatusCode::kInvalidArgument);
  LaunchSpec missing = SpawnSpec(2, {});
  missing.argv = {"no-such-program-ddpspawn"};
  EXPECT_THAT(Job::Create(missing).status().message(), HasSubstr("not found on PATH"));
  LaunchSpec reserved = SpawnSpec(2, {"ok"});
  reserved.env = {"RANK=3"};
  EXPECT_THAT(Job::Create(reserved).status().message(), HasSubstr("RANK=3"));
  LaunchSpec no_worker;
  no_worker.start_method = StartMethod::kFork;
  EXPECT_EQ(Job::Create(no_worker).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseStartMethod("thread").status().code(), absl::StatusCode::kInvalidArgument);
  LaunchSpec no_program = ForkserverSpec(2, {});
  no_program.argv.clear();
  EXPECT_THAT(Job::Create(no_program).status().message(),
              HasSubstr("the forkserver start method needs argv"));
}

TEST(LauncherSpawnTest, EnvironmentFollowsTheTorchrunContract) {
  LaunchSpec spec = SpawnSpec(2, {});
  spec.argv = {
      "/bin/sh", "-c",
      "test \"$WORLD_SIZE\" = 2 && test \"$LOCAL_WORLD_SIZE\" = 2 && test \"$RANK\" = "
      "\"$LOCAL_RANK\" && test \"$NODE_RANK\" = 0 && test \"$MASTER_ADDR\" = 127.0.0.1 && test "
      "\"$MASTER_PORT\" -gt 0 && test \"$EXTRA\" = yes && test -d \"$DDPSPAWN_RUN_DIR\" && test "
      "\"$OPENBLAS_NUM_THREADS\" -ge 1 && test \"$OMP_NUM_THREADS\" = 3 && test \"$(stat -c %a "
      "\"$DDPSPAWN_RUN_DIR\")\" = 700 && test \"$(ls /proc/self/fd | wc -l)\" -le 5 && "
      // spec.env replaces what the launcher inherited (getenv finds a name's first entry): one
      // EXTRA reaches the rank.
      "test \"$(tr '\\0' '\\n' < /proc/$$/environ | grep -c '^EXTRA=')\" = 1"};
  spec.env = {"EXTRA=yes", "OMP_NUM_THREADS=3"};
  setenv("EXTRA", "inherited", 1);
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(std::move(spec), &status);
  unsetenv("EXTRA");
  EXPECT_TRUE(status.ok()) << status;
}

// The ranks' parent is a server that is an exec of the worker program (not a fork of this test), a
// child of this launcher, and the next launch with the same program, arguments and environment
// reuses it, though another program's launch came between.
TEST(LauncherForkserverTest, AnExecedServerForksTheRanksAndServesTheNextLaunchToo) {
  absl::Status status;
  std::unique_ptr<Job> first = RunJob(ForkserverSpec(3, {"parent"}), &status);
  ASSERT_TRUE(status.ok()) << status;
  const std::string result = first->result().value_or("");
  pid_t server = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(result, "parent "), &server)) << result;
  EXPECT_NE(server, getpid());
  EXPECT_EQ(ParentOf(server), getpid());
  const std::filesystem::path exe =
      std::filesystem::read_symlink(absl::StrCat("/proc/", server, "/exe"));
  EXPECT_EQ(exe.filename(), "test_worker") << exe;  // this test's binary is launcher_test
  for (const RankOutcome& outcome : first->outcomes()) EXPECT_EQ(outcome.state, RankState::kExited);

  // Another program's arguments get a server of their own, and the first stays for its next launch.
  std::unique_ptr<Job> other = RunJob(ForkserverSpec(2, {"parent", "other arguments"}), &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_NE(other->result().value_or(""), result);

  std::unique_ptr<Job> second = RunJob(ForkserverSpec(3, {"parent"}), &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(second->result().value_or(""), result) << "the second launch started a new server";
  ExpectNoWorkerLeft(*second);
}

TEST(LauncherForkserverTest, FailuresNameTheRankAndCause) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(ForkserverSpec(3, {"exit", "2", "7"}), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("rank 2"));
  EXPECT_THAT(status.message(), HasSubstr("exited with code 7"));
  ExpectNoWorkerLeft(*job);

  job = RunJob(ForkserverSpec(2, {"signal", "0", "11"}), &status);
  EXPECT_THAT(status.message(), HasSubstr("rank 0"));
  EXPECT_THAT(status.message(), HasSubstr("SIGSEGV"));
  ExpectNoWorkerLeft(*job);

  job = RunJob(ForkserverSpec(2, {"throw", "1"}), &status);
  EXPECT_THAT(status.message(), HasSubstr("rank 1"));
  EXPECT_THAT(status.message(), HasSubstr("deliberate failure in the test worker"));
  ExpectNoWorkerLeft(*job);

  LaunchSpec hanging = ForkserverSpec(2, {"hang", "1"});
  hanging.timeout = absl::Seconds(1);
  job = RunJob(std::move(hanging), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("ran past its timeout of 1s"));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherForkserverTest, AProgramThatDoesNotServeIsRefusedWithTheReason) {
  absl::Status status;
  LaunchSpec spec = ForkserverSpec(2, {});
  spec.argv = {"/bin/true"};
  std::unique_ptr<Job> job = RunJob(std::move(spec), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("ServeForksIfForkserver()"));
}

// A server that dies takes its ranks with it; the job says so, and the next launch starts a new
// server.
TEST(LauncherForkserverTest, ADeadServerFailsItsJobAndIsReplaced) {
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(ForkserverSpec(2, {"hang"}));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  const pid_t server = ParentOf((*job)->outcomes()[0].pid);
  ASSERT_GT(server, 1);
  ASSERT_EQ(ParentOf(server), getpid());
  kill(server, SIGKILL);
  absl::Status status = (*job)->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  // The server is named as the cause, first; not a rank.
  EXPECT_THAT(std::string(status.message()),
              StartsWith(absl::StrCat("the forkserver that started the ranks (pid ", server,
                                      ") died, and took them with it: rank ")));
  for (const RankOutcome& outcome : (*job)->outcomes()) {
    bool dead = false;
    for (int i = 0; i < 500 && !dead; ++i) {
      dead = ProcessDead(outcome.pid);
      if (!dead) absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(dead) << "rank pid " << outcome.pid << " outlived its forkserver";
  }

  absl::Status next_status;
  std::unique_ptr<Job> next = RunJob(ForkserverSpec(2, {"parent"}), &next_status);
  ASSERT_TRUE(next_status.ok()) << next_status;
  EXPECT_NE(next->result().value_or(""), absl::StrCat("parent ", server));
}

TEST(LauncherForkTest, ResultAndExceptionInForkedChildren) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(ForkSpec(2,
                                             [](int rank) {
                                               if (rank == 0) (void)SetWorkerResult("forked");
                                               return 0;
                                             }),
                                    &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(job->result().value_or(""), "forked");

  job = RunJob(ForkSpec(2,
                        [](int rank) -> int {
                          if (rank == 1) throw std::runtime_error("thrown in a forked rank");
                          SleepForever();
                        }),
               &status);
  EXPECT_EQ(job->failed_rank(), 1);
  EXPECT_THAT(status.message(), HasSubstr("thrown in a forked rank"));
  EXPECT_THAT(status.message(), HasSubstr("exited with code 1"));
  ExpectNoWorkerLeft(*job);
}

TEST(LauncherForkTest, ExitCodeSignalsAndTimeout) {
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(ForkSpec(2,
                                             [](int rank) -> int {
                                               if (rank == 1) return 5;
                                               SleepForever();
                                             }),
                                    &status);
  EXPECT_EQ(job->failed_rank(), 1);
  EXPECT_THAT(status.message(), HasSubstr("exited with code 5"));
  ExpectNoWorkerLeft(*job);

  for (int sig : {SIGSEGV, SIGKILL}) {
    job = RunJob(ForkSpec(3,
                          [sig](int rank) -> int {
                            if (rank == 2) raise(sig);
                            SleepForever();
                          }),
                 &status);
    EXPECT_EQ(job->failed_rank(), 2);
    EXPECT_THAT(status.message(), HasSubstr(sig == SIGSEGV ? "SIGSEGV" : "SIGKILL"));
    ExpectNoWorkerLeft(*job);
  }

  // A rank killed by SIGPIPE wrote to a connection whose peer had gone: the peer killed a moment
  // later is the cause, not the rank reaped first.
  job = RunJob(ForkSpec(3,
                        [](int rank) -> int {
                          if (rank == 0) raise(SIGPIPE);
                          if (rank == 1) {
                            absl::SleepFor(absl::Milliseconds(10));
                            raise(SIGKILL);
                          }
                          SleepForever();
                        }),
               &status);
  EXPECT_EQ(job->failed_rank(), 1) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 1 (pid"));
  EXPECT_EQ(job->outcomes()[0].signal, SIGPIPE);
  ExpectNoWorkerLeft(*job);

  LaunchSpec hang = ForkSpec(2, [](int) -> int { SleepForever(); });
  hang.timeout = absl::Milliseconds(500);
  job = RunJob(std::move(hang), &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  ExpectNoWorkerLeft(*job);
}

// This process's open descriptors, as test_worker's descriptors mode lists them.
std::string OpenDescriptors() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return "cannot read /proc/self/fd";
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.' && std::atoi(entry->d_name) != dirfd(dir)) {
      fds.push_back(std::atoi(entry->d_name));
    }
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return absl::StrJoin(fds, " ");
}

std::set<int> DescriptorSet(const std::string& list) {
  std::set<int> fds;
  for (absl::string_view fd : absl::StrSplit(list, ' ', absl::SkipEmpty())) {
    fds.insert(std::atoi(std::string(fd).c_str()));
  }
  return fds;
}

// A file the launcher holds open without O_CLOEXEC, as a caller's files often are.
class InheritableFile {
 public:
  InheritableFile() : fd_(open("/dev/null", O_RDONLY)) {}
  ~InheritableFile() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

TEST(LauncherDescriptorTest, SpawnedAndForkserverRanksGetOnlyTheStandardStreams) {
  InheritableFile file;
  ASSERT_GE(file.fd(), 3);
  for (bool forkserver : {false, true}) {
    absl::Status status;
    std::unique_ptr<Job> job = RunJob(
        forkserver ? ForkserverSpec(2, {"descriptors"}) : SpawnSpec(2, {"descriptors"}), &status);
    ASSERT_TRUE(status.ok()) << status;
    const std::string list = job->result().value_or("");
    const std::set<int> fds = DescriptorSet(list);
    EXPECT_EQ(fds.count(file.fd()), 0u) << "rank 0 has " << list;
    for (int fd : fds)
      EXPECT_LE(fd, 2) << "rank 0 has " << list << " (forkserver " << forkserver << ")";
  }
}

TEST(LauncherDescriptorTest, ForkedRanksCloseDescriptorsOnlyWhenAsked) {
  InheritableFile file;
  ASSERT_GE(file.fd(), 3);
  for (bool close_them : {true, false}) {
    LaunchSpec spec = ForkSpec(
        2, [](int rank) { return rank == 0 && !SetWorkerResult(OpenDescriptors()).ok() ? 1 : 0; });
    spec.fork_close_descriptors = close_them;
    absl::Status status;
    std::unique_ptr<Job> job = RunJob(std::move(spec), &status);
    ASSERT_TRUE(status.ok()) << status;
    const std::string list = job->result().value_or("");
    const std::set<int> fds = DescriptorSet(list);
    if (close_them) {
      EXPECT_EQ(fds.count(file.fd()), 0u) << "rank 0 has " << list;
      for (int fd : fds) EXPECT_LE(fd, 2) << "rank 0 has " << list;
    } else {  // the worker is a copy of its caller and may use its files
      EXPECT_EQ(fds.count(file.fd()), 1u) << "rank 0 has " << list;
    }
  }
}

TEST(LauncherForkTest, WorkerRunsOnANewThreadUnlessTold) {
  for (bool new_thread : {true, false}) {
    LaunchSpec spec = ForkSpec(1, [](int) {
      const bool main_thread = syscall(SYS_gettid) == getpid();
      return SetWorkerResult(main_thread ? "forking thread" : "new thread").ok() ? 0 : 1;
    });
    spec.fork_worker_thread = new_thread;
    absl::Status status;
    std::unique_ptr<Job> job = RunJob(std::move(spec), &status);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(job->result().value_or(""), new_thread ? "new thread" : "forking thread");
  }
}

// GNU OpenMP's pool does not survive fork in the thread that used it: forked ranks that run
// 2-thread ATen work after the launcher's thread did must still finish (test_worker's own job times
// out after 60 s rather than hang).
TEST(LauncherForkTest, RanksForkedAfterOpenMpWorkDoNotHang) {
  LaunchSpec spec = SpawnSpec(1, {"fork_after_parallel"});
  spec.timeout = absl::Seconds(120);
  absl::Status status;
  std::unique_ptr<Job> job = RunJob(std::move(spec), &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(job->result().value_or(""), "forked ranks ran 2-thread work");
}

// A launcher that dies by SIGKILL takes its workers with it, in both start methods, and the
// children the workers forked, and its run directory goes too (its guardian removes it).
TEST(LauncherOrphanTest, WorkersAndTheirChildrenDieWithAKilledLauncher) {
  for (const char* method : {"spawn", "fork", "forkserver"}) {
    std::string pid_file = absl::StrCat(testing::TempDir(), "/pids-", method);
    const std::string tmp = absl::StrCat(testing::TempDir(), "/tmp-", method);
    ASSERT_TRUE(std::filesystem::create_directories(tmp));
    pid_t launcher = fork();
    if (launcher == 0) {
      setenv("TMPDIR", tmp.c_str(), 1);  // where the run directory goes
      execl(kWorker, kWorker, "launch", method, pid_file.c_str(), nullptr);
      _exit(127);
    }
    std::vector<pid_t> workers;
    for (int i = 0; i < 1000 && workers.empty(); ++i) {
      std::ifstream in(pid_file);
      for (pid_t pid; in >> pid;) workers.push_back(pid);
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(workers.size(), 2u) << method;
    std::vector<pid_t> children;  // one per worker, forked by the worker
    for (int rank = 0; rank < 2; ++rank) {
      const std::string child_file = absl::StrCat(pid_file, ".child", rank);
      for (int i = 0; i < 1000 && !std::filesystem::exists(child_file); ++i) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      std::ifstream in(child_file);
      pid_t pid = 0;
      ASSERT_TRUE(in >> pid) << method << ": rank " << rank << " wrote no child pid";
      children.push_back(pid);
    }
    for (pid_t pid : workers) EXPECT_EQ(kill(pid, 0), 0) << method;
    for (pid_t pid : children) EXPECT_FALSE(ProcessDead(pid)) << method;
    ASSERT_FALSE(std::filesystem::is_empty(tmp))
        << method << ": the job made no run directory in TMPDIR";
    kill(launcher, SIGKILL);
    waitpid(launcher, nullptr, 0);
    for (pid_t pid : workers) {
      bool gone = false;
      for (int i = 0; i < 500 && !gone; ++i) {
        gone = kill(pid, 0) == -1 && errno == ESRCH;
        if (!gone) absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_TRUE(gone) << method << " worker " << pid << " outlived its launcher";
    }
    for (pid_t pid : children) {
      bool dead = false;
      for (int i = 0; i < 500 && !dead; ++i) {
        dead = ProcessDead(pid);
        if (!dead) absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_TRUE(dead) << method << ": worker's child " << pid << " outlived the launcher";
      if (!dead) kill(pid, SIGKILL);
    }
    bool run_dir_gone = false;
    for (int i = 0; i < 500 && !run_dir_gone; ++i) {
      run_dir_gone = std::filesystem::is_empty(tmp);
      if (!run_dir_gone) absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(run_dir_gone) << method << ": the killed launcher left "
                              << std::filesystem::directory_iterator(tmp)->path();
  }
}

// SIGINT to the launcher reaches the workers, and the job reports the interrupt.
TEST(LauncherSignalTest, SigintIsForwarded) {
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(SpawnSpec(2, {"hang"}));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE((*job)->Start().ok());
  std::thread interrupter([] {
    absl::SleepFor(absl::Milliseconds(300));
    kill(getpid(), SIGINT);
  });
  absl::Status status = (*job)->Wait();
  interrupter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("SIGINT"));
  for (const RankOutcome& outcome : (*job)->outcomes()) {
    EXPECT_EQ(outcome.state, RankState::kSignaled);
    EXPECT_EQ(outcome.signal, SIGINT);
  }
  ExpectNoWorkerLeft(**job);
}

// A rank that ignores SIGTERM is killed with SIGKILL once the grace period is over, and the job
// says so: the failing rank is the one reported, the ignoring rank's outcome is SIGKILL and the
// message names it, and a rank that heeds SIGTERM ends by SIGTERM.
TEST(LauncherSignalTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  LaunchSpec spec = SpawnSpec(3, {"ignore_term", "1"});  // rank 2 fails once all are ready
  spec.grace_period = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(std::move(spec));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  const absl::Time waiting = absl::Now();
  absl::Status status = (*job)->Wait();
  const absl::Duration waited = absl::Now() - waiting;
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_EQ((*job)->failed_rank(), 2);
  EXPECT_THAT(status.message(), HasSubstr("rank 2"));
  EXPECT_THAT(status.message(), HasSubstr("exited with code 3"));
  EXPECT_THAT(status.message(),
              HasSubstr("rank 1 did not stop within the 1s grace period after SIGTERM"));
  const RankOutcome& ignoring = (*job)->outcomes()[1];
  EXPECT_EQ(ignoring.state, RankState::kSignaled);
  EXPECT_EQ(ignoring.signal, SIGKILL);
  EXPECT_TRUE(ignoring.stopped_by_launcher);
  const RankOutcome& heeding = (*job)->outcomes()[0];
  EXPECT_EQ(heeding.state, RankState::kSignaled);
  EXPECT_EQ(heeding.signal, SIGTERM);
  EXPECT_TRUE(heeding.stopped_by_launcher);
  // Not before the grace period: rank 2's failure is noticed inside Wait().
  EXPECT_GE(waited, absl::Seconds(1));
  ExpectNoWorkerLeft(**job);
}

// In fork mode too, SIGTERM and SIGINT sent to the launcher reach every rank, and the job reports
// the signal.
TEST(LauncherSignalTest, SigtermAndSigintAreForwardedToForkedRanks) {
  for (int sig : {SIGTERM, SIGINT}) {
    DefaultDisposition inherited(sig);
    absl::StatusOr<std::unique_ptr<Job>> job =
        Job::Create(ForkSpec(2, [](int) -> int { SleepForever(); }));
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Start().ok());
    std::thread sender([sig] { SendWhenHandled(sig); });
    absl::Status status = (*job)->Wait();
    sender.join();
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
    EXPECT_THAT(status.message(), HasSubstr(SignalName(sig)));
    for (const RankOutcome& outcome : (*job)->outcomes()) {
      EXPECT_EQ(outcome.state, RankState::kSignaled) << SignalName(sig);
      EXPECT_EQ(outcome.signal, sig) << "the rank was not stopped by the forwarded signal";
      EXPECT_TRUE(outcome.stopped_by_launcher);
    }
    ExpectNoWorkerLeft(**job);
  }
}

// What the forked ranks of SecondSigtermKillsAtOnce write to the test: 'r' once their SIGTERM
// handler is in place, 't' when it runs.
int g_rank_pipe = -1;

void NoteSigterm(int) { (void)!write(g_rank_pipe, "t", 1); }

// A second SIGTERM while the ranks are being stopped does not wait for the grace period: every rank
// still running gets SIGKILL at once.
TEST(LauncherSignalTest, SecondSigtermKillsAtOnce) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  g_rank_pipe = fds[1];
  LaunchSpec spec = ForkSpec(2, [](int) -> int {
    signal(SIGTERM, NoteSigterm);  // survives SIGTERM
    (void)!write(g_rank_pipe, "r", 1);
    SleepForever();
  });
  spec.grace_period = absl::Seconds(120);
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(std::move(spec));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  std::thread sender([read_end = fds[0]] {
    // Whether `count` bytes `want` came within 30 s (a broken launcher fails the test instead of
    // hanging it).
    auto await = [read_end](char want, int count) {
      pollfd readable = {read_end, POLLIN, 0};
      for (char c; count > 0;) {
        if (poll(&readable, 1, 30000) != 1 || read(read_end, &c, 1) != 1) return false;
        count -= c == want;
      }
      return true;
    };
    if (!await('r', 2)) return;  // both ranks handle SIGTERM
    SendWhenHandled(SIGTERM);
    if (!await('t', 1)) return;  // the launcher forwarded it and is stopping the ranks
    kill(getpid(), SIGTERM);
  });
  const absl::Time waiting = absl::Now();
  absl::Status status = (*job)->Wait();
  const absl::Duration waited = absl::Now() - waiting;
  sender.join();
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("ranks 0, 1 were killed with SIGKILL: the launcher got "
                                          "a second signal"));
  for (const RankOutcome& outcome : (*job)->outcomes()) {
    EXPECT_EQ(outcome.state, RankState::kSignaled);
    EXPECT_EQ(outcome.signal, SIGKILL);
  }
  EXPECT_LT(waited, absl::Seconds(120)) << "the second SIGTERM did not cut the grace period short";
  ExpectNoWorkerLeft(**job);
}

}  // namespace
}  // namespace ddpspawn
