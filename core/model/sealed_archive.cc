// Sealed archives: the envelope's checksum, LibTorch's archive and its "format" key (see
// sealed_archive.h).
#include "core/model/sealed_archive.h"

#include <torch/serialize/archive.h>

#include <cstdint>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/model/bounded_read.h"
#include "core/model/checkpoint_envelope.h"
#include "core/model/pickle_sizes.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

std::string FormatName(absl::string_view kind, int format) {
  return absl::StrCat(kind, "-", format);
}

}  // namespace

absl::StatusOr<std::string> SealArchive(absl::string_view kind,
                                        torch::serialize::OutputArchive& archive) {
  std::string bytes;
  RETURN_IF_ERROR(InvalidInputOnException(absl::StrCat("serializing the ", kind), [&] {
    archive.write("format", c10::IValue(FormatName(kind, kCheckpointFormat)));
    std::ostringstream out;
    archive.save_to(out);
    bytes = SealCheckpoint(out.str());
    return absl::OkStatus();
  }));
  return bytes;
}

absl::Status OpenSealedArchive(const std::string& bytes, absl::string_view kind,
                               c10::optional<c10::Device> device,
                               torch::serialize::InputArchive& archive) {
  ASSIGN_OR_RETURN(UnsealedCheckpoint unsealed, UnsealCheckpoint(bytes));
  RETURN_IF_ERROR(CheckArchivePickles(unsealed.archive));
  RETURN_IF_ERROR(InvalidInputOnException("the file is not a LibTorch archive", [&] {
    const absl::string_view archive_bytes = unsealed.archive;
    archive.load_from([archive_bytes](uint64_t pos, void* out,
                                      size_t n) { return ReadWithin(archive_bytes, pos, out, n); },
                      [archive_bytes] { return archive_bytes.size(); }, device);
    return absl::OkStatus();
  }));
  c10::IValue format;
  const std::string expected = FormatName(kind, unsealed.format);
  if (!archive.try_read("format", format) || !format.isString()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a ", kind, " file (expected format ", expected, ")"));
  }
  if (format.toStringRef() != expected) {
    // A format-2 archive without its header lost its checksum on the way.
    return absl::InvalidArgumentError(absl::StrCat(
        "the archive says ", format.toStringRef(), " but the file around it is ", expected,
        " (its checksum header is missing or was stripped, or it is another kind of file); it was "
        "not loaded"));
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
