// Checking a pickle's stated sizes against its bytes (see pickle_sizes.h).
#include "core/model/pickle_sizes.h"

#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/model/bounded_read.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// How an opcode's argument is laid out (pickle protocols 0 to 5).
enum class Argument {
  kNone,
  kFixed,          // `size` bytes
  kLength,         // a `size`-byte little-endian length, then that many bytes
  kMemoIndex,      // a `size`-byte little-endian memo index (LONG_BINPUT)
  kLine,           // text up to a newline
  kMemoIndexLine,  // a decimal memo index up to a newline (PUT)
  kTwoLines,       // two newline-terminated texts (GLOBAL, INST)
  kStop,
  kUnknown,
};

struct Layout {
  Argument argument = Argument::kUnknown;
  int size = 0;
};

// Pickle's opcodes by the layout of their argument. Any other byte ends the walk: LibTorch's
// unpickler has the last word on it.
Layout LayoutOf(char opcode) {
  const auto among = [opcode](absl::string_view opcodes) {
    return absl::StrContains(opcodes, opcode);
  };
  if (opcode == '.') return {Argument::kStop, 0};
  if (among("(012NRabd}el]ost)uQ\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98")) {
    return {Argument::kNone, 0};
  }
  if (among("Khq\x80\x82")) return {Argument::kFixed, 1};
  if (among("M\x83")) return {Argument::kFixed, 2};
  if (among("Jj\x84")) return {Argument::kFixed, 4};
  if (among("G\x95")) return {Argument::kFixed, 8};  // BINFLOAT; FRAME's length (opcodes follow)
  if (opcode == 'r') return {Argument::kMemoIndex, 4};
  if (among("UC\x8a\x8c")) return {Argument::kLength, 1};
  if (among("TXB\x8b")) return {Argument::kLength, 4};
  if (among("\x8d\x8e\x96")) return {Argument::kLength, 8};
  if (among("ILFSVPg")) return {Argument::kLine, 0};
  if (opcode == 'p') return {Argument::kMemoIndexLine, 0};
  if (among("ci")) return {Argument::kTwoLines, 0};
  return {Argument::kUnknown, 0};
}

uint64_t LittleEndian(absl::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i > 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i - 1]);
  }
  return value;
}

absl::Status TooLarge(absl::string_view name, size_t offset, absl::string_view what, uint64_t value,
                      size_t pickle_size) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, " is damaged: the opcode at byte ", offset, " gives ", what, " ", value,
                   ", more than its ", pickle_size, " bytes could hold; it was not read"));
}

}  // namespace

absl::Status CheckPickleSizes(absl::string_view pickle, absl::string_view name) {
  size_t at = 0;
  while (at < pickle.size()) {
    const size_t offset = at;
    const Layout layout = LayoutOf(pickle[at++]);
    const size_t left = pickle.size() - at;
    switch (layout.argument) {
      case Argument::kStop:
      case Argument::kUnknown:
        return absl::OkStatus();
      case Argument::kNone:
        break;
      case Argument::kFixed:
        if (left < static_cast<size_t>(layout.size)) return absl::OkStatus();
        at += layout.size;
        break;
      case Argument::kMemoIndex: {
        if (left < static_cast<size_t>(layout.size)) return absl::OkStatus();
        const uint64_t index = LittleEndian(pickle.substr(at, layout.size));
        if (index > pickle.size())
          return TooLarge(name, offset, "memo index", index, pickle.size());
        at += layout.size;
        break;
      }
      case Argument::kLength: {
        if (left < static_cast<size_t>(layout.size)) return absl::OkStatus();
        const uint64_t length = LittleEndian(pickle.substr(at, layout.size));
        at += layout.size;
        if (length > pickle.size() - at) {
          return TooLarge(name, offset, "a length of", length, pickle.size());
        }
        at += length;
        break;
      }
      case Argument::kLine:
      case Argument::kMemoIndexLine:
      case Argument::kTwoLines: {
        const int lines = layout.argument == Argument::kTwoLines ? 2 : 1;
        for (int line = 0; line < lines; ++line) {
          const size_t end = pickle.find('\n', at);
          if (end == absl::string_view::npos) return absl::OkStatus();
          uint64_t index = 0;
          if (layout.argument == Argument::kMemoIndexLine &&
              absl::SimpleAtoi(pickle.substr(at, end - at), &index) && index > pickle.size()) {
            return TooLarge(name, offset, "memo index", index, pickle.size());
          }
          at = end + 1;
        }
        break;
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// CheckPickleSizes on `reader`'s data.pkl and constants.pkl; `archive_size`: the file's bytes.
absl::Status CheckReaderPickles(caffe2::serialize::PyTorchStreamReader& reader,
                                size_t archive_size) {
  // The records LibTorch unpickles (not getAllRecords, which throws on a stray record that
  // LibTorch's loaders never look at).
  for (const std::string record : {"data.pkl", "constants.pkl"}) {
    if (!reader.hasRecord(record)) continue;
    if (const size_t stated = reader.getRecordSize(record); stated > archive_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the archive's ", record, " states ", stated, " bytes, more than the file's ",
          archive_size, " (a compressed pickle, which torch.save never writes); it was not read"));
    }
    auto [data, size] = reader.getRecord(record);
    RETURN_IF_ERROR(CheckPickleSizes(absl::string_view(static_cast<const char*>(data.get()), size),
                                     absl::StrCat("the archive's ", record)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckArchivePickles(absl::string_view archive) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_unique<BoundedReader>(archive));
    return CheckReaderPickles(reader, archive.size());
  } catch (const std::exception&) {
    return absl::OkStatus();  // not an archive LibTorch opens: its reader says why next
  }
}

absl::Status CheckArchiveFilePickles(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    return CheckReaderPickles(reader, std::filesystem::file_size(path));
  } catch (const std::exception&) {
    return absl::OkStatus();  // as above
  }
}

}  // namespace ddpspawn
