// Checkpoint framing and its integrity check (see checkpoint_envelope.h).
#include "core/model/checkpoint_envelope.h"

#include <cstdint>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/util/crc32.h"

namespace ddpspawn {
namespace {

constexpr absl::string_view kFamily = "ddpspawn-checkpoint-";
constexpr absl::string_view kMagic = "ddpspawn-checkpoint-2 ";
constexpr absl::string_view kZipMagic = "PK\x03\x04";  // a LibTorch archive: format 1
constexpr size_t kLongestHeader = 128;

absl::Status Corrupt(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("the file is corrupt: ", why, "; it was not loaded"));
}

}  // namespace

std::string SealCheckpoint(absl::string_view archive) {
  std::string bytes =
      absl::StrFormat("%scrc32=%08x size=%d\n", kMagic, Crc32(archive), archive.size());
  bytes.append(archive.data(), archive.size());
  return bytes;
}

absl::StatusOr<UnsealedCheckpoint> UnsealCheckpoint(absl::string_view bytes) {
  if (absl::StartsWith(bytes, kZipMagic)) return UnsealedCheckpoint{1, bytes};
  if (absl::StartsWith(bytes, kFamily) && !absl::StartsWith(bytes, kMagic)) {
    const absl::string_view version = bytes.substr(kFamily.size(), 8);
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint of format '", version.substr(0, version.find_first_of(" \n")),
                     "', which this ddpspawn (format ", kCheckpointFormat,
                     ") cannot read; was it written by a newer version?"));
  }
  if (!absl::StartsWith(bytes, kMagic)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a ddpspawn checkpoint (it starts with neither '", kFamily,
                     "' nor a LibTorch archive's 'PK'); was it written by ddpspawn, and whole?"));
  }
  const size_t end = bytes.substr(0, kLongestHeader).find('\n');
  if (end == absl::string_view::npos) return Corrupt("its header line is damaged");
  const absl::string_view header = bytes.substr(kMagic.size(), end - kMagic.size());
  std::vector<absl::string_view> fields = absl::StrSplit(header, ' ');
  uint32_t stored = 0;
  uint64_t size = 0;
  if (fields.size() != 2 || !absl::ConsumePrefix(&fields[0], "crc32=") || fields[0].size() != 8 ||
      !absl::SimpleHexAtoi(fields[0], &stored) || !absl::ConsumePrefix(&fields[1], "size=") ||
      !absl::SimpleAtoi(fields[1], &size)) {
    return Corrupt(
        absl::StrCat("its header line '", absl::CHexEscape(bytes.substr(0, end)), "' is damaged"));
  }
  const absl::string_view archive = bytes.substr(end + 1);
  if (archive.size() != size) {
    return Corrupt(absl::StrCat("its header gives ", size, " bytes of data but it holds ",
                                archive.size(), " (truncated, or appended to?)"));
  }
  const uint32_t computed = Crc32(archive);
  if (computed != stored) {
    return Corrupt(
        absl::StrFormat("checksum mismatch (stored crc32 %08x, computed %08x)", stored, computed));
  }
  return UnsealedCheckpoint{kCheckpointFormat, archive};
}

}  // namespace ddpspawn
