// CRC-32 (IEEE 802.3, the checksum of zip and zlib) and CRC-32C over a byte string, for detecting
// accidental corruption of files we write. Not a defence against deliberate tampering: anyone who
// can change a file can fix up its CRC.
#ifndef DDPSPAWN_CORE_UTIL_CRC32_H_
#define DDPSPAWN_CORE_UTIL_CRC32_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ddpspawn {

// crc32("123456789") == 0xcbf43926, as zlib's crc32() computes it.
uint32_t Crc32(absl::string_view bytes);

// CRC-32C (Castagnoli), the checksum of TFRecord files such as TensorBoard's event files:
// Crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(absl::string_view bytes);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_CRC32_H_
