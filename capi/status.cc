// Status codes and the thread-local last error of the C ABI; the version entry points.
#include "capi/status.h"

#include <cstdlib>
#include <string>

#include "core/version/build_info.h"

namespace ddpspawn::capi {
namespace {

thread_local std::string t_last_error;

// ddpspawn_last_error's longest text (ddpspawn.h): a rank's 10 MB traceback is not copied whole
// into every thread's last error.
constexpr size_t kMaxErrorBytes = size_t{64} * 1024;

// `message`, or its start and a note when it is longer than kMaxErrorBytes (cut between UTF-8
// characters, not inside one).
std::string Capped(absl::string_view message) {
  if (message.size() <= kMaxErrorBytes) return std::string(message);
  const std::string note =
      absl::StrCat(" ... [truncated: the message was ", message.size(), " bytes]");
  size_t keep = kMaxErrorBytes - note.size();
  while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(message.substr(0, keep), note);
}

ddpspawn_status CodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return DDPSPAWN_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
      return DDPSPAWN_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kAborted:
      return DDPSPAWN_ERR_WORKER_FAILED;
    case absl::StatusCode::kDeadlineExceeded:
      return DDPSPAWN_ERR_TIMEOUT;
    case absl::StatusCode::kCancelled:
      return DDPSPAWN_ERR_INTERRUPTED;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kUnimplemented:
      return DDPSPAWN_ERR_UNAVAILABLE;
    case absl::StatusCode::kFailedPrecondition:
      return DDPSPAWN_ERR_FAILED_PRECONDITION;
    default:
      return DDPSPAWN_ERR_INTERNAL;
  }
}

}  // namespace

void SetLastError(absl::string_view message) { t_last_error = Capped(message); }

absl::StatusCode CodeFromStatus(ddpspawn_status code) {
  switch (code) {
    case DDPSPAWN_OK:
      return absl::StatusCode::kOk;
    case DDPSPAWN_ERR_INVALID_ARGUMENT:
      return absl::StatusCode::kInvalidArgument;
    case DDPSPAWN_ERR_WORKER_FAILED:
      return absl::StatusCode::kAborted;
    case DDPSPAWN_ERR_TIMEOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case DDPSPAWN_ERR_INTERRUPTED:
      return absl::StatusCode::kCancelled;
    case DDPSPAWN_ERR_UNAVAILABLE:
      return absl::StatusCode::kUnavailable;
    case DDPSPAWN_ERR_FAILED_PRECONDITION:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

ddpspawn_status Report(const absl::Status& status) {
  if (status.ok()) {
    t_last_error.clear();
  } else {
    t_last_error = Capped(status.message());
  }
  return CodeOf(status);
}

}  // namespace ddpspawn::capi

extern "C" {

DDPSPAWN_EXPORT const char* ddpspawn_last_error(void) {
  return ddpspawn::capi::t_last_error.c_str();
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_set_last_error(ddpspawn_status code, const char* message) {
  ddpspawn::capi::SetLastError(message != nullptr ? message : "");
  return code;
}

DDPSPAWN_EXPORT int32_t ddpspawn_abi_version(void) { return DDPSPAWN_ABI_VERSION; }

DDPSPAWN_EXPORT const char* ddpspawn_version(void) { return ddpspawn::kVersion; }

DDPSPAWN_EXPORT const char* ddpspawn_build_info(void) { return ddpspawn::BuildInfoText().c_str(); }

DDPSPAWN_EXPORT void ddpspawn_free(void* ptr) { std::free(ptr); }

}  // extern "C"
