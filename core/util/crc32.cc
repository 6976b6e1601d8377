// CRC-32 and CRC-32C (see crc32.h). CRC-32 with the slicing-by-16 implementation LibTorch ships for
// its own zip archives (caffe2/serialize/crc_alt.h, Stephan Brumme's Crc32). That header defines
// its functions and tables rather than declaring them, so it may be included in this one file only;
// they stay hidden inside our library (-fvisibility=hidden) and LibTorch does not export its copy.
#include "core/util/crc32.h"

#include <caffe2/serialize/crc_alt.h>

namespace ddpspawn {

uint32_t Crc32(absl::string_view bytes) { return crc32_fast(bytes.data(), bytes.size()); }

// A byte at a time from a 256-entry table of the reflected polynomial 0x82f63b78: TensorBoard's
// event files are small, so speed does not matter.
uint32_t Crc32c(absl::string_view bytes) {
  static const auto* const kTable = [] {
    auto* table = new uint32_t[256];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      table[i] = c;
    }
    return table;
  }();
  uint32_t crc = 0xffffffffu;
  for (const char ch : bytes) crc = kTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

}  // namespace ddpspawn
