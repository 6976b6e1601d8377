// Temporary files of atomic writes (see temp_files.h).
#include "core/util/temp_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/util/process_state.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

constexpr absl::string_view kInfix = ".tmp.";
constexpr int kRandomChars = 6;  // mkostemp's XXXXXX
constexpr int kAttempts = 8;

struct Split {
  std::string directory;  // "." when `path` has no slash
  std::string base;
};

Split SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// kRandomChars letters and digits from the kernel's random source.
absl::StatusOr<std::string> RandomNameChars() {
  constexpr absl::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char bytes[kRandomChars] = {};
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  std::string chars;
  for (unsigned char byte : bytes) chars += kAlphabet[byte % kAlphabet.size()];
  return chars;
}

// The writer's pid when `name` is one of our temporary files for `base`.
bool ParseTempName(absl::string_view name, absl::string_view base, pid_t* pid) {
  if (!absl::ConsumePrefix(&name, base) || !absl::ConsumePrefix(&name, kInfix)) return false;
  absl::string_view digits = name.substr(0, name.find('.'));
  absl::string_view rest = name.substr(digits.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(digits, pid) || *pid <= 0) {
    return false;
  }
  if (rest.empty()) return true;  // the earlier name.tmp.<pid>
  return absl::ConsumePrefix(&rest, ".") && rest.size() == kRandomChars &&
         std::all_of(rest.begin(), rest.end(), absl::ascii_isalnum);
}

// Gone, or a zombie nobody has reaped yet (it writes nothing any more).
bool ProcessIsGone(pid_t pid) {
  return (kill(pid, 0) != 0 && errno == ESRCH) || HasExited(ReadProcessState(pid));
}

// Removes `name` (in `dir_fd`) if it is a stale temporary file of ours.
bool RemoveIfStale(int dir_fd, const char* name, pid_t pid) {
  struct stat before {};
  if (fstatat(dir_fd, name, &before, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (!S_ISREG(before.st_mode) || before.st_uid != geteuid() || !ProcessIsGone(pid)) return false;
  const int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat opened {};
  bool stale = fstat(fd, &opened) == 0 && opened.st_dev == before.st_dev &&
               opened.st_ino == before.st_ino && flock(fd, LOCK_EX | LOCK_NB) == 0;
  // Unlinked while we hold its lock: a writer that locks it next sees st_nlink == 0 and starts over
  // with a new file.
  stale = stale && unlinkat(dir_fd, name, 0) == 0;
  close(fd);
  return stale;
}

}  // namespace

absl::StatusOr<TempFile> CreateTempFileFor(const std::string& path) {
  // Naming an unnamed file takes /proc (see CommitTempFile), which a minimal container or chroot
  // may lack.
  static const bool proc_mounted = access("/proc/self/fd", X_OK) == 0;
  if (!proc_mounted) return CreateNamedTempFileFor(path);
  const std::string directory = SplitPath(path).directory;
  const int fd = open(directory.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return CreateNamedTempFileFor(path);  // which says why, if it fails too
  // Locked before it has a name, so a sweeper never finds it unlocked.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("cannot lock a temporary file in ", directory, ": ", std::strerror(error)));
  }
  return TempFile{fd, ""};
}

absl::StatusOr<TempFile> CreateNamedTempFileFor(const std::string& path) {
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string name = absl::StrCat(path, kInfix, getpid(), ".", std::string(kRandomChars, 'X'));
    // mkostemp: O_CREAT | O_EXCL, mode 0600, a fresh random name on EEXIST.
    const int fd = mkostemp(name.data(), O_CLOEXEC);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot create a temporary file ", name, ": ", std::strerror(errno)));
    }
    // A sweeper that took this file for a dead writer's holds its lock, or has unlinked it already:
    // start over.
    struct stat info {};
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &info) == 0 && info.st_nlink > 0) {
      return TempFile{fd, std::move(name)};
    }
    close(fd);
  }
  return absl::InternalError(
      absl::StrCat("cannot create a temporary file beside ", path, ": it vanished ", kAttempts,
                   " times (is another process sweeping ", SplitPath(path).directory, "?)"));
}

absl::Status CommitTempFile(TempFile& temp, const std::string& path) {
  for (int attempt = 0; temp.path.empty(); ++attempt) {
    if (attempt == kAttempts) {
      return absl::InternalError(absl::StrCat("cannot name a temporary file beside ", path, ": ",
                                              kAttempts, " random names were taken"));
    }
    ASSIGN_OR_RETURN(const std::string random, RandomNameChars());
    std::string name = absl::StrCat(path, kInfix, getpid(), ".", random);
    // Through /proc: linking an open file by its descriptor alone (AT_EMPTY_PATH) needs
    // CAP_DAC_READ_SEARCH.
    const std::string self = absl::StrCat("/proc/self/fd/", temp.fd);
    if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      temp.path = std::move(name);
    } else if (errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot name a temporary file ", name, ": ", std::strerror(errno)));
    }
  }
  if (rename(temp.path.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", temp.path, " to ", path, ": ", std::strerror(errno)));
  }
  temp.path.clear();  // it is `path` now
  return absl::OkStatus();
}

void DiscardTempFile(TempFile& temp) {
  if (!temp.path.empty()) unlink(temp.path.c_str());
  if (temp.fd >= 0) close(temp.fd);
  temp = TempFile{};
}

int SweepStaleTempFiles(const std::string& path) {
  const Split split = SplitPath(path);
  const int dir_fd = open(split.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return 0;
  std::vector<std::pair<std::string, pid_t>> candidates;
  {
    const int list_fd = dup(dir_fd);
    DIR* dir = list_fd < 0 ? nullptr : fdopendir(list_fd);
    if (dir == nullptr && list_fd >= 0) close(list_fd);
    while (dir != nullptr) {
      const dirent* entry = readdir(dir);
      if (entry == nullptr) break;
      pid_t pid = 0;
      if (ParseTempName(entry->d_name, split.base, &pid))
        candidates.emplace_back(entry->d_name, pid);
    }
    if (dir != nullptr) closedir(dir);
  }
  int removed = 0;
  for (const auto& [name, pid] : candidates) removed += RemoveIfStale(dir_fd, name.c_str(), pid);
  close(dir_fd);
  return removed;
}

}  // namespace ddpspawn
