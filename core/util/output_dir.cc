// Output directories (see output_dir.h).
#include "core/util/output_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace ddpspawn {

absl::Status PrepareOutputDirectory(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("the output directory is empty");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const uid_t me = geteuid();
  struct stat link {};
  if (lstat(dir.c_str(), &link) == 0 && S_ISLNK(link.st_mode) && link.st_uid != me &&
      link.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the output directory ", dir, " is a symbolic link made by another user (uid ", link.st_uid,
        "), who chose where ddpspawn would write; remove it, or use another directory"));
  }
  struct stat info {};
  if (stat(dir.c_str(), &info) != 0) {
    const std::string why = error ? error.message() : std::strerror(errno);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the output directory ", dir, ": ", why));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the output directory ", dir, " exists and is not a directory"));
  }
  if (info.st_uid != me && info.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the output directory ", dir, " belongs to another user (uid ", info.st_uid,
        "; this process runs as uid ", me,
        "), who could redirect what ddpspawn writes there; use a directory of your own"));
  }
  if ((info.st_mode & S_IWOTH) != 0 && (info.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the output directory ", dir,
        " is writable by every user and not sticky, so anyone could replace what ddpspawn writes "
        "there; use a directory of your own, or chmod o-w (or +t) it"));
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
