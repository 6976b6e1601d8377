// Whole-file reads, and the writes of every file ddpspawn puts in an output directory (checkpoints,
// metrics.csv, predictions.csv, the launcher's result files): whole files replaced atomically (a
// reader never sees half a file), and appends. None of them writes through a symbolic link: a link
// where an output goes is refused with an error that names it, so that a link planted in a shared
// directory cannot turn a write into one to a file elsewhere.
#ifndef DDPSPAWN_CORE_UTIL_FILES_H_
#define DDPSPAWN_CORE_UTIL_FILES_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// Replaces `path` with `bytes` atomically: a new temporary file beside it (core/util/temp_files.h;
// stale ones of dead writers are swept first), then rename. With `durable`, the file and its
// directory are fsynced before and after the rename. The file gets `mode` (not reduced by the
// umask).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes, bool durable,
                                 mode_t mode = 0600);

// Appends `text` to `path`, creating it (mode 0644 less the umask) with `header` first when it is
// new or empty. Refuses a symbolic link (O_NOFOLLOW), anything but a regular file, and a file with
// other hard links.
absl::Status AppendToFile(const std::string& path, absl::string_view text,
                          absl::string_view header = "");

// What AppendToFile(path) would refuse in what is at `path` now (a link, anything but a regular
// file, a file with other hard links), checked ahead of time, as before a job starts; Ok when
// nothing is there yet. AppendToFile checks again when it opens the file.
absl::Status CheckAppendable(const std::string& path);

// NotFound when the file does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// The folder part of `path`: "." when it has no slash, "/" for a file in the root.
std::string DirectoryOf(const std::string& path);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_FILES_H_
