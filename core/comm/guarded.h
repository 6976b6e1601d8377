// LibTorch's exceptions (c10::Error and std::exception from c10d) turned into
// Status at the edge of every call into c10d, without LibTorch's backtrace.
#ifndef DDPSPAWN_CORE_COMM_GUARDED_H_
#define DDPSPAWN_CORE_COMM_GUARDED_H_

#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// "<what> failed: <message>": DeadlineExceeded when the message speaks of a
// timeout, else Internal.
inline absl::Status FromException(absl::string_view what, absl::string_view message) {
  std::string lower = absl::AsciiStrToLower(message);
  std::string text = absl::StrCat(what, " failed: ", message);
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
    return absl::DeadlineExceededError(text);
  }
  return absl::InternalError(text);
}

// Runs `body`, turning any exception into a Status that names `what`.
template <typename Body>
absl::Status Guarded(absl::string_view what, Body&& body) {
  try {
    body();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return FromException(what, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return FromException(what, e.what());
  }
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_GUARDED_H_
