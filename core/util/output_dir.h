// The directories ddpspawn writes its outputs into (--default-root-dir and its checkpoints/):
// created when missing, and refused when another user could swap what is in them. Refused, before
// anything is written:
//   - a directory owned by another user (root excepted): its owner could
//     replace checkpoints/ or a file with a link between our checks and our
//     writes, for instance to make a root job write where they cannot;
//   - a symbolic link made by another user (root excepted), as the kernel's
//     protected_symlinks would in a sticky directory: they chose the target;
//   - a directory every user may write to without the sticky bit (for the
//     same reason; a sticky one, like /tmp, is accepted, and the files in it
//     are guarded by core/util/files.h).
// Each error names the directory and says what to do. The directories above it are taken as given:
// whoever owns one of them can still swap what is below, but refusing every such path would refuse
// the usual shared project trees (/projects/lab owned by its head, /projects/lab/you by you).
#ifndef DDPSPAWN_CORE_UTIL_OUTPUT_DIR_H_
#define DDPSPAWN_CORE_UTIL_OUTPUT_DIR_H_

#include <string>

#include "absl/status/status.h"

namespace ddpspawn {

// Creates `dir` (and missing parents, mode 0777 less the umask) and checks it as above.
absl::Status PrepareOutputDirectory(const std::string& dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_OUTPUT_DIR_H_
