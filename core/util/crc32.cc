// CRC-32 (see crc32.h) with the slicing-by-16 implementation LibTorch ships for
// its own zip archives (caffe2/serialize/crc_alt.h, Stephan Brumme's Crc32).
// That header defines its functions and tables rather than declaring them, so
// it may be included in this one file only; they stay hidden inside our
// library (-fvisibility=hidden) and LibTorch does not export its copy.
#include "core/util/crc32.h"

#include <caffe2/serialize/crc_alt.h>

namespace ddpspawn {

uint32_t Crc32(absl::string_view bytes) { return crc32_fast(bytes.data(), bytes.size()); }

}  // namespace ddpspawn
