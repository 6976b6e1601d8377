// Whole-file reads and atomic writes (see files.h).
#include "core/util/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/util/temp_files.h"

namespace ddpspawn {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
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

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes, bool durable) {
  SweepStaleTempFiles(path);
  absl::StatusOr<TempFile> temp = CreateTempFileFor(path);
  if (!temp.ok()) return temp.status();
  absl::Status status = WriteAll(temp->fd, bytes, temp->path);
  if (status.ok() && durable && fsync(temp->fd) != 0) status = Errno("cannot fsync", temp->path);
  // The temporary file stays open (and locked) until it has its final name.
  if (status.ok() && rename(temp->path.c_str(), path.c_str()) != 0) {
    status = Errno("cannot rename to", path);
  }
  if (!status.ok()) unlink(temp->path.c_str());
  close(temp->fd);
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

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return contents.str();
}

}  // namespace ddpspawn
