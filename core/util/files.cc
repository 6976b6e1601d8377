// Whole-file reads, atomic writes and appends (see files.h).
#include "core/util/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"
#include "core/util/temp_files.h"

namespace ddpspawn {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status LinkRefused(const std::string& path) {
  char target[PATH_MAX] = {};
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  return absl::FailedPreconditionError(absl::StrCat(
      path, " is a symbolic link", n > 0 ? absl::StrCat(" (to ", target, ")") : "",
      "; ddpspawn does not write through links: remove it, or choose another output directory"));
}

// What is at `path` now may be replaced by a regular file of ours.
absl::Status CheckReplaceable(const std::string& path) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("cannot inspect", path);
  }
  if (S_ISLNK(info.st_mode)) return LinkRefused(path);
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a regular file; ddpspawn will not replace it"));
  }
  return absl::OkStatus();
}

// What AppendToFile refuses in the file `info` describes (the link is refused before: lstat, or
// O_NOFOLLOW).
absl::Status CheckAppendableStat(const std::string& path, const struct stat& info) {
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file; ddpspawn appends only to its own files"));
  }
  if (info.st_nlink > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " has ", info.st_nlink - 1,
                     " other name(s) (hard links); ddpspawn appends only to its own files: "
                     "remove it, or choose another output directory"));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot write", path);
    data += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes, bool durable,
                                 mode_t mode) {
  // rename() replaces a link rather than following it, so this check is for a clear error, not for
  // safety.
  RETURN_IF_ERROR(CheckReplaceable(path));
  SweepStaleTempFiles(path);
  ASSIGN_OR_RETURN(TempFile temp, CreateTempFileFor(path));
  const std::string what =
      temp.path.empty() ? absl::StrCat("a temporary file for ", path) : temp.path;
  absl::Status status = WriteAll(temp.fd, bytes, what);
  if (status.ok() && fchmod(temp.fd, mode) != 0) status = Errno("cannot chmod", what);
  if (status.ok() && durable && fsync(temp.fd) != 0) status = Errno("cannot fsync", what);
  // The temporary file stays open (and locked) until it has its final name.
  if (status.ok()) status = CommitTempFile(temp, path);
  DiscardTempFile(temp);
  if (status.ok() && durable) {
    std::string dir = DirectoryOf(path);
    int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      fsync(dir_fd);
      close(dir_fd);
    }
  }
  return status;
}

absl::Status AppendToFile(const std::string& path, absl::string_view text,
                          absl::string_view header) {
  // O_NONBLOCK: a FIFO planted here fails instead of blocking.
  const int fd =
      open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return errno == ELOOP ? LinkRefused(path) : Errno("cannot open", path);
  struct stat info {};
  absl::Status status =
      fstat(fd, &info) != 0 ? Errno("cannot inspect", path) : CheckAppendableStat(path, info);
  if (status.ok() && info.st_size == 0 && !header.empty()) status = WriteAll(fd, header, path);
  if (status.ok()) status = WriteAll(fd, text, path);
  close(fd);
  return status;
}

absl::Status CheckAppendable(const std::string& path) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) return absl::OkStatus();  // AppendToFile will say
  if (S_ISLNK(info.st_mode)) return LinkRefused(path);
  return CheckAppendableStat(path, info);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return contents.str();
}

}  // namespace ddpspawn
