// The framing of a checkpoint file around its LibTorch archive, so that a damaged file is refused
// instead of loaded.
//
//   format 2 (written now): one header line, then the archive:
//     "ddpspawn-checkpoint-2 crc32=<8 hex digits> size=<decimal bytes>\n"
//     the CRC-32 and the size are the archive's; both are checked before
//     anything is read from it.
//   format 1 (ddpspawn before checksums): the bare archive (a zip file).
//     Still accepted, unverified, so that existing checkpoints keep loading:
//     they were written before there was a checksum to write. The archive
//     itself names its format, and one that says 2 (a format-2 file whose
//     header was stripped) is refused by RestoreCheckpoint.
#ifndef DDPSPAWN_CORE_MODEL_CHECKPOINT_ENVELOPE_H_
#define DDPSPAWN_CORE_MODEL_CHECKPOINT_ENVELOPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

inline constexpr int kCheckpointFormat = 2;

// `archive` behind a format-2 header.
std::string SealCheckpoint(absl::string_view archive);

struct UnsealedCheckpoint {
  int format = 0;             // 1 or 2
  absl::string_view archive;  // points into the bytes given to UnsealCheckpoint
};

// The archive inside `bytes`, verified when it has a checksum (format 2). A corrupt or truncated
// file, or one that is no checkpoint at all, is an InvalidArgument error that says so (the caller
// adds the file's name).
absl::StatusOr<UnsealedCheckpoint> UnsealCheckpoint(absl::string_view bytes);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_CHECKPOINT_ENVELOPE_H_
