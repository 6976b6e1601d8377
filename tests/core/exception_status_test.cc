// ExceptionStatus: LibTorch's message without its backtrace, after the caller's prefix, with a code
// from the exception's type.
#include "core/util/exception_status.h"

#include <c10/util/Exception.h>

#include <stdexcept>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

template <typename Throw>
absl::Status Caught(Throw&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return ExceptionStatus("doing it", e);
  }
  return absl::OkStatus();
}

TEST(ExceptionStatusTest, LibTorchsMessageWithoutItsBacktrace) {
  try {
    TORCH_CHECK(false, "a bad shape");
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("Exception raised from"));  // what a site printed before
    const absl::Status status = ExceptionStatus("doing it", e);
    EXPECT_EQ(status, absl::InternalError("doing it: a bad shape"));
    EXPECT_THAT(status.message(), Not(HasSubstr("Exception raised from")));
  }
}

TEST(ExceptionStatusTest, CodesFollowTheType) {
  EXPECT_EQ(Caught([] { TORCH_CHECK_VALUE(false, "v"); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Caught([] { TORCH_CHECK_TYPE(false, "t"); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Caught([] { TORCH_CHECK_INDEX(false, "i"); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Caught([] { TORCH_CHECK_NOT_IMPLEMENTED(false, "n"); }).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Caught([] { TORCH_CHECK_WITH(OutOfMemoryError, false, "o"); }).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Caught([] { C10_THROW_ERROR(DistNetworkError, "Socket Timeout"); }).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(
      Caught([] { C10_THROW_ERROR(DistStoreError, "wait timeout after 10ms, keys: k"); }).code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Caught([] { C10_THROW_ERROR(DistNetworkError, "Connection reset by peer"); }).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(
      Caught([] { C10_THROW_ERROR(DistBackendError, "NCCL error: remote process exited"); }).code(),
      absl::StatusCode::kInternal);
  EXPECT_EQ(Caught([] { throw std::runtime_error("Timed out waiting 10ms for recv"); }).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Caught([] { throw std::runtime_error("plain"); }),
            absl::InternalError("doing it: plain"));
}

TEST(ExceptionStatusTest, AnInputThatThrowsIsInvalidArgumentWithoutTheBacktrace) {
  const absl::StatusOr<int> thrown =
      InvalidInputOnException("reading it", []() -> absl::StatusOr<int> {
        TORCH_CHECK(false, "bad bytes");
        return 1;
      });
  ASSERT_EQ(thrown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(thrown.status().message(), "reading it: bad bytes");
  EXPECT_EQ(*InvalidInputOnException("reading it", []() -> absl::StatusOr<int> { return 7; }), 7);
  EXPECT_EQ(InvalidInputOnException("reading it", [] { return absl::NotFoundError("gone"); }),
            absl::NotFoundError("gone"));
}

}  // namespace
}  // namespace ddpspawn
