// The C ABI's error plumbing: absl::Status to status codes, the thread-local last error, and
// StatusCodeOf, which keeps C++ exceptions from crossing the boundary.
#ifndef DDPSPAWN_CAPI_STATUS_H_
#define DDPSPAWN_CAPI_STATUS_H_

#include <cstring>
#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/util/exception_status.h"
#include "ddpspawn/ddpspawn.h"

namespace ddpspawn::capi {

// Records `status` as this thread's last error (or clears it) and returns its code.
ddpspawn_status Report(const absl::Status& status);
// Sets this thread's last error (ddpspawn_set_last_error).
void SetLastError(absl::string_view message);
// A status code's absl code (the inverse of Report's mapping, as far as one exists): for a
// callback's failure.
absl::StatusCode CodeFromStatus(ddpspawn_status code);

// Runs `body` (returning absl::Status) and returns its status as a C code, reported as the last
// error: what every entry point returns. An exception becomes its ExceptionStatus (LibTorch's
// without its backtrace), DDPSPAWN_ERR_INTERNAL unless its type or a timeout says otherwise. (The
// core's Guarded, core/comm/guarded.h, is the other catch: a void body's exception as an
// absl::Status, at each call into c10d.)
template <typename Body>
ddpspawn_status StatusCodeOf(Body&& body) {
  try {
    return Report(body());
  } catch (const std::exception& e) {
    return Report(ExceptionStatus("unexpected C++ exception", e));
  } catch (...) {
    return Report(absl::InternalError("unexpected C++ exception"));
  }
}

inline absl::Status NotNull(const void* pointer, const char* name) {
  if (pointer != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " must not be NULL"));
}

// A caller's (data, size) buffer as a view: data may be NULL only when size is 0, and size must be
// at most `limit` (a size no buffer can have, such as SIZE_MAX, would otherwise trip an assertion
// inside absl::string_view).
inline absl::StatusOr<absl::string_view> BytesArgument(const void* data, size_t size, size_t limit,
                                                       const char* name) {
  if (size > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", size, " bytes; at most ", limit, " bytes may be passed"));
  }
  if (size == 0) return absl::string_view();
  if (absl::Status s = NotNull(data, "data"); !s.ok()) return s;
  return absl::string_view(static_cast<const char*>(data), size);
}

// The struct_size of every released version of an option struct. A caller's struct must end exactly
// where one of them ends; a size that ends mid-field is refused. When a field is appended to a
// struct, add its previous size (offsetof the new field) to its list here.
template <typename Options>
struct ReleasedSizes {
  static constexpr size_t kSizes[] = {sizeof(Options)};
};

// Copies a caller's option struct over `defaults`, honouring struct_size: an older caller's smaller
// struct keeps the newer fields' defaults; a size that no released version has (larger: the caller
// was built against a newer header; mid-field: garbage) is an error.
template <typename Options>
absl::Status ReadOptions(const Options* given, const char* name, Options* out) {
  if (given == nullptr) return absl::OkStatus();
  std::string released;
  for (size_t size : ReleasedSizes<Options>::kSizes) {
    if (given->struct_size == size) {
      std::memcpy(static_cast<void*>(out), given, given->struct_size);
      out->struct_size = sizeof(Options);
      return absl::OkStatus();
    }
    absl::StrAppend(&released, released.empty() ? "" : ", ", size);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name, ".struct_size is ", given->struct_size, ", which no released version of it has (",
      released, "); start from ", name, "_INIT or ", name, "_init()"));
}

// libgit2's *_init(opts, version): writes `defaults` (the current *_INIT) into the caller's struct,
// only as many bytes as the caller's struct_size, which must be a released size, so a newer library
// never writes past an older caller's struct.
template <typename Options>
absl::Status InitOptions(Options* options, uint32_t struct_size, const char* name,
                         const Options& defaults) {
  if (absl::Status s = NotNull(options, "options"); !s.ok()) return s;
  for (size_t size : ReleasedSizes<Options>::kSizes) {
    if (struct_size == size) {
      std::memcpy(static_cast<void*>(options), &defaults, struct_size);
      options->struct_size = struct_size;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("struct_size ", struct_size,
                                                 " is no released version of ", name,
                                                 " (pass sizeof the struct you allocated)"));
}

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_STATUS_H_
