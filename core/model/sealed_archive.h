// A LibTorch archive inside the checksummed envelope of checkpoint_envelope.h, whose "format" key
// names what it is: the checkpoint file (kind "ddpspawn-checkpoint") and a sharded checkpoint's
// files (core/model/sharded_checkpoint.h). A damaged, truncated or mislabelled file is refused
// before anything is read from it.
#ifndef DDPSPAWN_CORE_MODEL_SEALED_ARCHIVE_H_
#define DDPSPAWN_CORE_MODEL_SEALED_ARCHIVE_H_

#include <c10/core/Device.h>
#include <c10/util/Optional.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace ddpspawn {

// Writes "format" (`kind`-<the envelope's format>) into `archive`, serializes it and seals it.
absl::StatusOr<std::string> SealArchive(absl::string_view kind,
                                        torch::serialize::OutputArchive& archive);

// Verifies `bytes` whole and opens its archive, whose "format" must say `kind` and the envelope's
// format; tensors load onto `device` (none: where they were saved). InvalidArgument otherwise (the
// caller adds the file's name).
absl::Status OpenSealedArchive(const std::string& bytes, absl::string_view kind,
                               c10::optional<c10::Device> device,
                               torch::serialize::InputArchive& archive);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_SEALED_ARCHIVE_H_
