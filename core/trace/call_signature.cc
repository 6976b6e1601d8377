// Descriptions of collective calls (see call_signature.h).
#include "core/trace/call_signature.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddpspawn {
namespace {

template <size_t N>
void CopyText(absl::string_view text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  if (n > 0) std::memcpy(out, text.data(), n);  // an empty view's data may be null
  std::memset(out + n, 0, N - n);
}

template <size_t N>
absl::string_view TextOf(const char (&text)[N]) {
  return absl::string_view(text, strnlen(text, N));
}

thread_local uint32_t current_backward_passes = 0;

}  // namespace

ScopedBackwardPasses::ScopedBackwardPasses(uint32_t passes) : previous_(current_backward_passes) {
  current_backward_passes = passes;
}

ScopedBackwardPasses::~ScopedBackwardPasses() { current_backward_passes = previous_; }

uint32_t ScopedBackwardPasses::Current() { return current_backward_passes; }

CallFingerprint CallFingerprint::Of(const CallSignature& call) {
  CallFingerprint print;
  std::memset(&print, 0, sizeof print);  // no stray padding bytes to compare
  CopyText(call.kind, print.kind);
  CopyText(call.dtype, print.dtype);
  CopyText(call.op, print.op);
  print.root = call.root;
  print.count = call.count;
  print.backward_passes = call.backward_passes;
  return print;
}

CallSignature CallFingerprint::signature() const {
  CallSignature call;
  call.kind = TextOf(kind);
  call.dtype = TextOf(dtype);
  call.op = TextOf(op);
  call.root = root;
  call.count = count;
  call.backward_passes = backward_passes;
  return call;
}

bool CallFingerprint::operator==(const CallFingerprint& other) const {
  return TextOf(kind) == TextOf(other.kind) && TextOf(dtype) == TextOf(other.dtype) &&
         TextOf(op) == TextOf(other.op) && root == other.root && count == other.count &&
         backward_passes == other.backward_passes;
}

std::string Describe(const CallSignature& call) {
  std::string text(call.kind);
  if (!call.op.empty()) absl::StrAppend(&text, " (", call.op, ")");
  if (!call.dtype.empty() || call.count != 0)
    absl::StrAppend(&text, " of ", call.count, " ", call.dtype);
  if (call.root >= 0) absl::StrAppend(&text, ", root rank ", call.root);
  if (call.backward_passes > 0) {
    absl::StrAppend(&text, ", DDP's gradients of ", call.backward_passes, " backward pass",
                    call.backward_passes == 1 ? "" : "es");
  }
  return text;
}

bool OnlyBackwardPassesDiffer(const std::vector<CallFingerprint>& calls) {
  bool passes_differ = false;
  for (const CallFingerprint& call : calls) {
    CallFingerprint same_passes = call;
    same_passes.backward_passes = calls[0].backward_passes;
    if (same_passes != calls[0]) return false;
    passes_differ = passes_differ || call.backward_passes != calls[0].backward_passes;
  }
  return passes_differ;
}

absl::Status MismatchedCallsError(const std::vector<std::string>& calls,
                                  bool backward_passes_differ) {
  std::string message =
      backward_passes_differ
          ? "the ranks synchronized DDP's gradients after different numbers of backward passes "
            "(no_sync was entered on some ranks and not on others: every rank must accumulate "
            "as many backward passes between two synchronized ones):"
          : "the ranks called different collectives (every rank must call the same ones in the "
            "same order, with the same dtype, count, op and root):";
  for (size_t r = 0; r < calls.size(); ++r)
    absl::StrAppend(&message, "\n  rank ", r, ": ", calls[r]);
  return absl::InvalidArgumentError(message);
}

}  // namespace ddpspawn
