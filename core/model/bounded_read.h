// Reads from bytes in memory for LibTorch's archive readers, which ask for ranges that a damaged
// file's directory points them to. LibTorch's torch::jit::VectorReader (behind pickle_load) copies
// whatever range is asked, past the end of the buffer too: a heap over-read that tools/fuzz found
// with a damaged torch.save file. This one copies only what the bytes hold, so the reader sees a
// short read and fails with an error. Checkpoints are read through it too (InputArchive's own
// flat-array reader clamps, but with a sum that could overflow).
#ifndef DDPSPAWN_CORE_MODEL_BOUNDED_READ_H_
#define DDPSPAWN_CORE_MODEL_BOUNDED_READ_H_

#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace ddpspawn {

// Copies bytes[pos, pos + n) into `out`, cut at the end of `bytes`, and zeroes the rest of the n
// bytes (for a caller that ignores a short count); returns how many bytes it copied (0 from `pos`
// on or past the end).
inline size_t ReadWithin(absl::string_view bytes, uint64_t pos, void* out, size_t n) {
  const size_t count = pos >= bytes.size() ? 0 : std::min<uint64_t>(n, bytes.size() - pos);
  if (count > 0) std::memcpy(out, bytes.data() + pos, count);
  std::memset(static_cast<char*>(out) + count, 0, n - count);
  return count;
}

// An in-memory archive for caffe2::serialize::PyTorchStreamReader, through ReadWithin. Borrows
// `bytes`, which must outlive it; const, so any thread may read.
class BoundedReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(absl::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    return ReadWithin(bytes_, pos, buf, n);
  }

 private:
  absl::string_view bytes_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_BOUNDED_READ_H_
