// The temporary files behind atomic writes: created exclusively under a name
// no one can guess, and swept away once the process that made them is gone
// (a write killed half way leaves its temporary file behind).
//
// A temporary file for /dir/name is /dir/name.tmp.<pid>.<6 random characters>
// (before this, /dir/name.tmp.<pid>; such files are swept too). Its writer
// holds an flock on it while it lives, so a writer whose pid is not visible
// here (another container sharing the directory) is never taken for dead.
#ifndef DDPSPAWN_CORE_UTIL_TEMP_FILES_H_
#define DDPSPAWN_CORE_UTIL_TEMP_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddpspawn {

struct TempFile {
  int fd = -1;  // open for writing, close-on-exec, locked, mode 0600
  std::string path;
};

// Creates a new temporary file beside `path` (O_CREAT|O_EXCL: an existing
// file or symbolic link of that name is never opened).
absl::StatusOr<TempFile> CreateTempFileFor(const std::string& path);

// Removes the temporary files for `path` whose writer is gone: regular files
// only, owned by this user, named by the pattern above, whose pid is no
// running process and whose lock nobody holds. Returns how many it removed;
// a file it cannot judge or remove is left alone.
int SweepStaleTempFiles(const std::string& path);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_TEMP_FILES_H_
