// Result and error files between workers and the launcher (see
// worker_channel.h).
#include "core/launch/worker_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/env/cluster_environment.h"

namespace ddpspawn {
namespace {

constexpr char kResultFile[] = "result";

std::string ErrorFile(int rank) { return absl::StrCat("rank", rank, ".error"); }

struct WorkerIdentity {
  std::string run_dir;
  int rank;
};

absl::StatusOr<WorkerIdentity> CurrentWorker() {
  const char* run_dir = std::getenv(kRunDirEnv);
  const char* rank_text = std::getenv("RANK");
  int rank = 0;
  if (run_dir == nullptr || rank_text == nullptr ||
      !absl::SimpleAtoi(rank_text, &rank)) {
    return absl::UnavailableError(
        "this process was not started by a ddpspawn launcher (DDPSPAWN_RUN_DIR "
        "and RANK are "
        "not set), so there is no launcher to hand a result or an error to");
  }
  return WorkerIdentity{run_dir, rank};
}

// Writes `bytes` to dir/name through a temporary file and a rename.
absl::Status WriteAtomically(const std::string& dir, const std::string& name,
                             absl::string_view bytes) {
  std::string final_path = absl::StrCat(dir, "/", name);
  std::string temp_path = absl::StrCat(final_path, ".tmp.", getpid());
  int fd =
      open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", temp_path, ": ", std::strerror(errno)));
  }
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      close(fd);
      unlink(temp_path.c_str());
      return absl::InternalError(
          absl::StrCat("cannot write ", temp_path, ": ", std::strerror(saved)));
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
  if (rename(temp_path.c_str(), final_path.c_str()) != 0) {
    int saved = errno;
    unlink(temp_path.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", temp_path, ": ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
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

absl::Status SetWorkerResult(absl::string_view bytes) {
  absl::StatusOr<WorkerIdentity> worker = CurrentWorker();
  if (!worker.ok()) return worker.status();
  if (worker->rank != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "only rank 0 hands a result back to the launcher; this is rank ",
        worker->rank));
  }
  return WriteAtomically(worker->run_dir, kResultFile, bytes);
}

absl::Status SetWorkerError(absl::string_view text) {
  absl::StatusOr<WorkerIdentity> worker = CurrentWorker();
  if (!worker.ok()) return worker.status();
  return WriteAtomically(worker->run_dir, ErrorFile(worker->rank), text);
}

void InstallTerminateHandler() {
  if (std::getenv(kRunDirEnv) != nullptr)
    std::set_terminate(RecordUncaughtException);
}

std::optional<std::string> ReadWorkerResult(const std::string& run_dir) {
  return ReadFile(absl::StrCat(run_dir, "/", kResultFile));
}

std::optional<std::string> ReadWorkerError(const std::string& run_dir,
                                           int rank) {
  return ReadFile(absl::StrCat(run_dir, "/", ErrorFile(rank)));
}

}  // namespace ddpspawn
