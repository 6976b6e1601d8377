// The C ABI's error plumbing: absl::Status to status codes, the thread-local
// last error, and a guard that keeps C++ exceptions from crossing the boundary.
#ifndef DDPSPAWN_CAPI_STATUS_H_
#define DDPSPAWN_CAPI_STATUS_H_

#include <cstring>
#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ddpspawn/ddpspawn.h"

namespace ddpspawn::capi {

// Records `status` as this thread's last error (or clears it) and returns its
// code.
ddpspawn_status Report(const absl::Status& status);

// Runs `body` (returning absl::Status); exceptions become
// DDPSPAWN_ERR_INTERNAL.
template <typename Body>
ddpspawn_status Guard(Body&& body) {
  try {
    return Report(body());
  } catch (const std::exception& e) {
    return Report(absl::InternalError(
        absl::StrCat("unexpected C++ exception: ", e.what())));
  } catch (...) {
    return Report(absl::InternalError("unexpected C++ exception"));
  }
}

inline absl::Status NotNull(const void* pointer, const char* name) {
  if (pointer != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " must not be NULL"));
}

// Copies a caller's option struct over `defaults`, honouring struct_size: an
// older caller's smaller struct keeps the newer fields' defaults; a struct
// larger than this library knows is an error (the caller was built against a
// newer header).
template <typename Options>
absl::Status ReadOptions(const Options* given, const char* name, Options* out) {
  if (given == nullptr) return absl::OkStatus();
  if (given->struct_size < sizeof(uint32_t) ||
      given->struct_size > sizeof(Options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".struct_size is ", given->struct_size, "; expected at most ",
        sizeof(Options), " (start from ", name, "_INIT or ", name, "_init())"));
  }
  std::memcpy(static_cast<void*>(out), given, given->struct_size);
  out->struct_size = sizeof(Options);
  return absl::OkStatus();
}

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_STATUS_H_
