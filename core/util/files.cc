// Whole-file reads and atomic writes (see files.h).
#include "core/util/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

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

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes, bool durable) {
  std::string temp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", temp);
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status error = Errno("cannot write", temp);
      close(fd);
      unlink(temp.c_str());
      return error;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (durable && fsync(fd) != 0) {
    absl::Status error = Errno("cannot fsync", temp);
    close(fd);
    unlink(temp.c_str());
    return error;
  }
  close(fd);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status error = Errno("cannot rename to", path);
    unlink(temp.c_str());
    return error;
  }
  if (durable) {
    std::string dir = DirectoryOf(path);
    int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      fsync(dir_fd);
      close(dir_fd);
    }
  }
  return absl::OkStatus();
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
