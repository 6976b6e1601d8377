// Descriptions of collective calls (see call_signature.h).
#include "core/env/call_signature.h"

#include "absl/strings/str_cat.h"

namespace ddpspawn {

std::string Describe(const CallSignature& call) {
  std::string text(call.kind);
  if (!call.op.empty()) absl::StrAppend(&text, " (", call.op, ")");
  if (!call.dtype.empty() || call.count != 0)
    absl::StrAppend(&text, " of ", call.count, " ", call.dtype);
  if (call.root >= 0) absl::StrAppend(&text, ", root rank ", call.root);
  return text;
}

absl::Status MismatchedCallsError(const std::vector<std::string>& calls) {
  std::string message =
      "the ranks called different collectives (every rank must call the same ones in the same "
      "order, with the same dtype, count, op and root):";
  for (size_t r = 0; r < calls.size(); ++r)
    absl::StrAppend(&message, "\n  rank ", r, ": ", calls[r]);
  return absl::InvalidArgumentError(message);
}

}  // namespace ddpspawn
