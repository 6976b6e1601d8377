// LibTorch's exceptions (c10::Error and std::exception from c10d) turned into Status at the edge of
// every call into c10d, without LibTorch's backtrace.
#ifndef DDPSPAWN_CORE_COMM_GUARDED_H_
#define DDPSPAWN_CORE_COMM_GUARDED_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/util/exception_status.h"

namespace ddpspawn {

// Runs `body`, turning any exception into "<what> failed: <message>" (ExceptionStatus:
// DeadlineExceeded when the message speaks of a timeout, else Internal for c10d's errors).
template <typename Body>
absl::Status Guarded(absl::string_view what, Body&& body) {
  return StatusOnException(absl::StrCat(what, " failed"), [&] { body(); });
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_GUARDED_H_
