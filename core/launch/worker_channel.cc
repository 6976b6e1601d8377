// Result and error files between workers and the launcher (see worker_channel.h).
#include "core/launch/worker_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/env/cluster_environment.h"
#include "core/env/run_dir.h"
#include "core/env/settings.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// SetWorkerGroupRank's rank; -1: none (RANK's).
std::atomic<int> g_group_rank{-1};

struct WorkerIdentity {
  std::string run_dir;
  int rank;
};

absl::StatusOr<WorkerIdentity> CurrentWorker() {
  std::optional<std::string> run_dir = ReadSetting(Setting::kRunDir);
  const char* rank_text = std::getenv("RANK");
  int rank = 0;
  if (!run_dir.has_value() || rank_text == nullptr || !absl::SimpleAtoi(rank_text, &rank)) {
    return absl::UnavailableError(
        "this process was not started by a ddpspawn launcher (DDPSPAWN_RUN_DIR and RANK are not "
        "set), so there is no launcher to hand a result or an error to");
  }
  return WorkerIdentity{*std::move(run_dir), rank};
}

std::optional<std::string> ReadFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) return std::nullopt;
  return *std::move(contents);
}

void RecordUncaughtException() {
  if (std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      (void)SetWorkerError(absl::StrCat("uncaught C++ exception: ", e.what()));
    } catch (...) {
      (void)SetWorkerError("uncaught C++ exception of a non-std type");
    }
  }
  std::abort();
}

}  // namespace

void SetWorkerGroupRank(int rank) { g_group_rank = rank; }

void SetWorkerProgress(int64_t count) {
  // Opened once per process: a forked worker does not inherit its parent's choice.
  static pid_t opened_in = -1;
  static int fd = -1;
  if (opened_in != getpid()) {
    opened_in = getpid();
    fd = -1;  // one inherited from a parent stays the parent's
    absl::StatusOr<WorkerIdentity> worker = CurrentWorker();
    // The run directory is the launcher's private 0700 one: nothing else can create names in it.
    if (worker.ok()) {
      fd = open(RunDirProgressFile(worker->run_dir, worker->rank).c_str(),
                O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
  }
  if (fd >= 0) (void)!pwrite(fd, &count, sizeof(count), 0);
}

absl::Status SetWorkerResult(absl::string_view bytes) {
  ASSIGN_OR_RETURN(WorkerIdentity worker, CurrentWorker());
  const int rank = g_group_rank >= 0 ? g_group_rank.load() : worker.rank;
  if (rank != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("only rank 0 hands a result back to the launcher; this is rank ", rank));
  }
  return WriteFileAtomically(RunDirResultFile(worker.run_dir), bytes,
                             /*durable=*/false);
}

absl::Status SetWorkerError(absl::string_view text) {
  ASSIGN_OR_RETURN(WorkerIdentity worker, CurrentWorker());
  // The order first: a peer that sees this report has its place recorded.
  RETURN_IF_ERROR(
      AppendToFile(RunDirFailureOrderFile(worker.run_dir), absl::StrCat(worker.rank, "\n")));
  return WriteFileAtomically(RunDirErrorFile(worker.run_dir, worker.rank), text,
                             /*durable=*/false);
}

void InstallTerminateHandler() {
  if (IsLaunchedWorker()) std::set_terminate(RecordUncaughtException);
}

std::optional<std::string> ReadWorkerResult(const std::string& run_dir) {
  return ReadFile(RunDirResultFile(run_dir));
}

std::optional<int64_t> ReadWorkerProgress(const std::string& run_dir, int rank) {
  const int fd = open(RunDirProgressFile(run_dir, rank).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  int64_t count = 0;
  const ssize_t n = pread(fd, &count, sizeof(count), 0);
  close(fd);
  if (n != static_cast<ssize_t>(sizeof(count))) return std::nullopt;
  return count;
}

std::optional<std::string> ReadWorkerError(const std::string& run_dir, int rank) {
  return ReadFile(RunDirErrorFile(run_dir, rank));
}

std::vector<int> ReadFailureReportOrder(const std::string& run_dir) {
  std::vector<int> order;
  const std::optional<std::string> text = ReadFile(RunDirFailureOrderFile(run_dir));
  if (!text.has_value()) return order;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    int rank = 0;
    if (absl::SimpleAtoi(line, &rank) && absl::c_find(order, rank) == order.end()) {
      order.push_back(rank);
    }
  }
  return order;
}

}  // namespace ddpspawn
