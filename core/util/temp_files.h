// The temporary files behind atomic writes, so that a writer killed half way leaves nothing a
// reader could take for the file, and, where it can, nothing at all.
//
// Where the file system allows it (Linux's O_TMPFILE: ext4, xfs, btrfs, tmpfs), the temporary file
// has no name while it is written: a writer killed before CommitTempFile leaves no trace.
// Committing links it under a temporary name and renames that over the target, so a name exists
// only between those two calls. Elsewhere the file is named from the start.
//
// A temporary name for /dir/name is /dir/name.tmp.<pid>.<6 random characters> (before this,
// /dir/name.tmp.<pid>; such files are swept too), created exclusively. Its writer holds an flock on
// it while it lives, so a writer whose pid is not visible here (another container sharing the
// directory) is never taken for dead; a named one a dead writer left is swept by the next write of
// that file.
#ifndef DDPSPAWN_CORE_UTIL_TEMP_FILES_H_
#define DDPSPAWN_CORE_UTIL_TEMP_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddpspawn {

// Owns nothing by itself: DiscardTempFile ends it, after CommitTempFile too. A plain value;
// thread-compatible.
struct TempFile {
  int fd = -1;  // open for writing, close-on-exec, locked, mode 0600
  // Empty while the file has no name (O_TMPFILE).
  std::string path;
};

// Creates a new temporary file for `path`, in its directory: unnamed where the file system allows
// and /proc is mounted, else named by the pattern above (O_CREAT|O_EXCL: an existing file or
// symbolic link of that name is never opened).
absl::StatusOr<TempFile> CreateTempFileFor(const std::string& path);

// The named kind only, whatever the file system allows (what CreateTempFileFor falls back to).
absl::StatusOr<TempFile> CreateNamedTempFileFor(const std::string& path);

// Gives `temp` the name `path`, replacing what is there atomically (rename; an unnamed file is
// first linked under a fresh temporary name, since a link never replaces). Closes nothing; on
// failure `temp` is left for DiscardTempFile.
absl::Status CommitTempFile(TempFile& temp, const std::string& path);

// Removes `temp`'s temporary name, if it has one, and closes it.
void DiscardTempFile(TempFile& temp);

// Removes the temporary files for `path` whose writer is gone: regular files only, owned by this
// user, named by the pattern above, whose pid is no running process and whose lock nobody holds.
// Returns how many it removed; a file it cannot judge or remove is left alone.
int SweepStaleTempFiles(const std::string& path);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_TEMP_FILES_H_
