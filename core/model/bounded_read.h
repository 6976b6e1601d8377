// Reads from bytes in memory for LibTorch's archive readers, which ask for
// ranges that a damaged file's directory points them to. LibTorch's
// torch::jit::VectorReader (behind pickle_load) copies whatever range is
// asked, past the end of the buffer too: a heap over-read that tools/fuzz
// found with a damaged torch.save file. This one copies only what the bytes
// hold, so the reader sees a short read and fails with an error. Checkpoints
// are read through it too (InputArchive's own flat-array reader clamps, but
// with a sum that could overflow).
#ifndef DDPSPAWN_CORE_MODEL_BOUNDED_READ_H_
#define DDPSPAWN_CORE_MODEL_BOUNDED_READ_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace ddpspawn {

// Copies bytes[pos, pos + n) into `out`, cut at the end of `bytes`, and
// zeroes the rest of the n bytes (for a caller that ignores a short count);
// returns how many bytes it copied (0 from `pos` on or past the end).
inline size_t ReadWithin(absl::string_view bytes, uint64_t pos, void* out, size_t n) {
  const size_t count = pos >= bytes.size() ? 0 : std::min<uint64_t>(n, bytes.size() - pos);
  if (count > 0) std::memcpy(out, bytes.data() + pos, count);
  std::memset(static_cast<char*>(out) + count, 0, n - count);
  return count;
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_BOUNDED_READ_H_
