// What a rank is about to run in a collective (kind, dtype, count, op, root, and for DDP's
// gradients the backward passes they sum), compared across ranks before it runs, and the error that
// names every rank's call when they differ. CallFingerprint is the one fixed-size form of a call
// that crosses processes: the shared-memory header, the flight recorder's file and the process
// group's agreement row all hold it, as c10d's CollectiveFingerPrint. Plain values;
// thread-compatible (ScopedBackwardPasses: per thread).
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
  // DDP's gradients: the backward passes they sum (those no_sync accumulated, and the synchronized
  // one), as ScopedBackwardPasses set it on the calling thread; 0 for any other call.
  uint32_t backward_passes = 0;
};

// While one lives, the collectives that its thread starts carry `passes` as their backward_passes
// (the reducer sets it around a synchronized backward's collectives, communication hooks'
// included), so that ranks that entered no_sync differently disagree at their first synchronized
// backward instead of summing gradients of different micro-batches. Scopes nest; the innermost
// counts.
class ScopedBackwardPasses {
 public:
  explicit ScopedBackwardPasses(uint32_t passes);
  ~ScopedBackwardPasses();
  ScopedBackwardPasses(const ScopedBackwardPasses&) = delete;
  ScopedBackwardPasses& operator=(const ScopedBackwardPasses&) = delete;

  // The innermost live scope's passes on this thread; 0 outside every scope.
  static uint32_t Current();

 private:
  uint32_t previous_;
};

// A CallSignature packed into 56 bytes, with no pointer: the texts are NUL-padded (cut to fit), so
// two fingerprints compare by their bytes.
struct CallFingerprint {
  char kind[16];
  char dtype[12];
  char op[8];
  int32_t root;
  uint64_t count;
  uint32_t backward_passes;
  uint32_t unused;  // zero

  static CallFingerprint Of(const CallSignature& call);
  // Views into this fingerprint: valid while it lives and does not change.
  CallSignature signature() const;
  bool operator==(const CallFingerprint& other) const;
  bool operator!=(const CallFingerprint& other) const { return !(*this == other); }
};
static_assert(sizeof(CallFingerprint) == 56, "a fixed layout that crosses processes");

// "all_reduce (sum) of 4 float32, root rank 1"; DDP's: "all_reduce (sum) of 4 float32, DDP's
// gradients of 2 backward passes".
std::string Describe(const CallSignature& call);

// Whether `calls` differ in their backward_passes and in nothing else (no_sync entered on some
// ranks only).
bool OnlyBackwardPassesDiffer(const std::vector<CallFingerprint>& calls);

// InvalidArgument listing `calls[r]` (a description) for every rank r; `backward_passes_differ`:
// OnlyBackwardPassesDiffer held, and the message names no_sync as the cause.
absl::Status MismatchedCallsError(const std::vector<std::string>& calls,
                                  bool backward_passes_differ);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRACE_CALL_SIGNATURE_H_
