// What a rank is about to run in a collective (kind, dtype, count, op, root), compared across ranks
// before it runs, and the error that names every rank's call when they differ. CallFingerprint is
// the one fixed-size form of a call that crosses processes: the shared-memory header, the flight
// recorder's file and the process group's agreement row all hold it, as c10d's
// CollectiveFingerPrint. Plain values; thread-compatible.
#ifndef DDPSPAWN_CORE_TRACE_CALL_SIGNATURE_H_
#define DDPSPAWN_CORE_TRACE_CALL_SIGNATURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

struct CallSignature {
  absl::string_view kind;   // "all_reduce", "broadcast", "barrier", ...
  absl::string_view dtype;  // "float32", ...; empty when there is no data
  absl::string_view op;     // "sum", "mean", ...; empty when there is none
  uint64_t count = 0;       // elements
  int root = -1;            // the source or destination rank; -1: none
};

// A CallSignature packed into 48 bytes, with no pointer: the texts are NUL-padded (cut to fit), so
// two fingerprints compare by their bytes.
struct CallFingerprint {
  char kind[16];
  char dtype[12];
  char op[8];
  int32_t root;
  uint64_t count;

  static CallFingerprint Of(const CallSignature& call);
  // Views into this fingerprint: valid while it lives and does not change.
  CallSignature signature() const;
  bool operator==(const CallFingerprint& other) const;
  bool operator!=(const CallFingerprint& other) const { return !(*this == other); }
};
static_assert(sizeof(CallFingerprint) == 48, "a fixed layout that crosses processes");

// "all_reduce (sum) of 4 float32, root rank 1".
std::string Describe(const CallSignature& call);

// InvalidArgument listing `calls[r]` (a description) for every rank r.
absl::Status MismatchedCallsError(const std::vector<std::string>& calls);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRACE_CALL_SIGNATURE_H_
