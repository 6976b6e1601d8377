// A walk over a pickle's opcodes, before LibTorch's unpickler reads it, that refuses sizes a
// damaged or hostile file states beyond its own bytes. LibTorch allocates what such a size asks
// before it finds the bytes missing: a string's length (up to 4 GiB from 4 bytes, or 2^64 from 8)
// and a memo index (LONG_BINPUT grows a table of 16-byte values to the index: up to 64 GiB).
// tools/fuzz found both with files under 2 KB. Free functions; no state.
#ifndef DDPSPAWN_CORE_MODEL_PICKLE_SIZES_H_
#define DDPSPAWN_CORE_MODEL_PICKLE_SIZES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// InvalidArgument, naming `name`, the opcode's offset and the size, when an argument's length runs
// past the end of `pickle` or a memo index exceeds its length (a pickler numbers its memo entries
// from 0, one per put, and each put takes at least 2 bytes). Stops at STOP, at an opcode it does
// not know and at a truncated argument, all of which LibTorch refuses itself.
absl::Status CheckPickleSizes(absl::string_view pickle, absl::string_view name);

// CheckPickleSizes on the pickles LibTorch reads from the zip archive `archive`: data.pkl
// (torch.save's and a LibTorch archive's) and constants.pkl (a LibTorch archive's). An archive
// LibTorch cannot open passes: its own reader refuses it next.
absl::Status CheckArchivePickles(absl::string_view archive);

// The same for the archive in the file at `path` (a TorchScript module), reading only its pickles.
absl::Status CheckArchiveFilePickles(const std::string& path);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_PICKLE_SIZES_H_
