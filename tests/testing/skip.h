// DDPSPAWN_SKIP_OR_FAIL(why): skips the current GoogleTest test, saying why, unless
// DDPSPAWN_REQUIRE_ALL_TESTS=1 is set (tools/test sets it for CI), where a test that cannot run is
// a failure that says what is missing. Use it in a test body where GTEST_SKIP() would go; like
// GTEST_SKIP(), it returns.
#ifndef DDPSPAWN_TESTS_TESTING_SKIP_H_
#define DDPSPAWN_TESTS_TESTING_SKIP_H_

#include <cstdlib>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace ddpspawn::test_skips {

inline constexpr char kRequireAllTests[] = "DDPSPAWN_REQUIRE_ALL_TESTS";

// Empty when a test that cannot run (for `why`) may be skipped: the variable is unset, empty or 0.
// Otherwise the failure message: for 1, and for any other value too (a mistyped switch must not
// quietly let tests skip).
inline std::string SkipFailure(std::string_view why) {
  const char* raw = std::getenv(kRequireAllTests);
  const std::string_view value = raw == nullptr ? std::string_view() : std::string_view(raw);
  if (value.empty() || value == "0") return "";
  std::string message = "this test cannot run here: ";
  message.append(why);
  if (value == "1") {
    message.append(" (DDPSPAWN_REQUIRE_ALL_TESTS=1 makes a skip a failure)");
  } else {
    message.append(" (and DDPSPAWN_REQUIRE_ALL_TESTS='");
    message.append(value);
    message.append("' is neither 0 nor 1; taken as 1)");
  }
  return message;
}

}  // namespace ddpspawn::test_skips

#define DDPSPAWN_SKIP_OR_FAIL(why)                                                      \
  do {                                                                                  \
    const std::string ddpspawn_skip_failure = ::ddpspawn::test_skips::SkipFailure(why); \
    if (!ddpspawn_skip_failure.empty()) {                                               \
      GTEST_FAIL() << ddpspawn_skip_failure;                                            \
    }                                                                                   \
    GTEST_SKIP() << (why);                                                              \
  } while (0)

#endif  // DDPSPAWN_TESTS_TESTING_SKIP_H_
