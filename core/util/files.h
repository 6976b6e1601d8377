// Whole-file reads and atomic writes (temporary file in the same directory,
// optional fsync, rename), so that a reader never sees half a file. The
// temporary file is created exclusively under a name no one can guess
// (core/util/temp_files.h).
#ifndef DDPSPAWN_CORE_UTIL_FILES_H_
#define DDPSPAWN_CORE_UTIL_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// Stale temporary files of dead writers of `path` are swept first. With
// `durable`, the file and its directory are fsynced before and after the
// rename.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes, bool durable);

// NotFound when the file does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_FILES_H_
