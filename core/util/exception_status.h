// LibTorch's exceptions as absl::Status, at every place that catches one: the message without
// LibTorch's C++ backtrace (c10::Error::what() appends one), after the caller's prefix, with a code
// from the exception's type (or, for a bad input, InvalidArgument: InvalidInputOnException).
// Header-only; its users link LibTorch (c10), as //core:crc32's do.
#ifndef DDPSPAWN_CORE_UTIL_EXCEPTION_STATUS_H_
#define DDPSPAWN_CORE_UTIL_EXCEPTION_STATUS_H_

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// c10::Error's message without its backtrace; any other exception's what().
inline const char* ExceptionMessage(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

// The code for `e`:
// - c10::NotImplementedError: Unimplemented;
// - c10::ValueError, TypeError, IndexError: InvalidArgument;
// - c10::OutOfMemoryError: ResourceExhausted;
// - a message that speaks of a timeout (c10d's stores and sockets, Gloo, NCCL's watchdog: "timed
//   out", "Timeout", "wait timeout after ...ms"): DeadlineExceeded, which the process group turns
//   into a report of what every rank was doing;
// - c10::DistError (DistBackendError, DistStoreError, DistNetworkError) and any other exception:
//   Internal, which the C ABI documents as "a collective failed (peer gone, connection reset ...)"
//   (DDPSPAWN_ERR_INTERNAL).
inline absl::StatusCode ExceptionCode(const std::exception& e) {
  if (dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr) {
    return absl::StatusCode::kUnimplemented;
  }
  if (dynamic_cast<const c10::ValueError*>(&e) != nullptr ||
      dynamic_cast<const c10::TypeError*>(&e) != nullptr ||
      dynamic_cast<const c10::IndexError*>(&e) != nullptr) {
    return absl::StatusCode::kInvalidArgument;
  }
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
    return absl::StatusCode::kResourceExhausted;
  }
  const std::string lower = absl::AsciiStrToLower(ExceptionMessage(e));
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  return absl::StatusCode::kInternal;
}

// "<prefix>: <message>" with ExceptionCode(e).
inline absl::Status ExceptionStatus(absl::string_view prefix, const std::exception& e) {
  return absl::Status(ExceptionCode(e), absl::StrCat(prefix, ": ", ExceptionMessage(e)));
}

// body() (returning void, absl::Status or absl::StatusOr<T>), with an exception it throws turned
// into ExceptionStatus(prefix, e).
template <typename Body>
auto StatusOnException(absl::string_view prefix, Body&& body) {
  using Result = decltype(body());
  using Returned = std::conditional_t<std::is_void_v<Result>, absl::Status, Result>;
  try {
    if constexpr (std::is_void_v<Result>) {
      body();
      return Returned();
    } else {
      return Returned(body());
    }
  } catch (const std::exception& e) {
    return Returned(ExceptionStatus(prefix, e));
  }
}

// body() (returning absl::Status or absl::StatusOr<T>), with an exception it throws turned into
// InvalidArgument "<prefix>: <message>": for code whose exceptions mean a bad input (a model, a
// checkpoint, a batch).
template <typename Body>
auto InvalidInputOnException(absl::string_view prefix, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": ", ExceptionMessage(e)));
  }
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_EXCEPTION_STATUS_H_
