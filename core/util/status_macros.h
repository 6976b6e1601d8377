// Early return on error for absl::Status and absl::StatusOr (Abseil keeps its own macros internal):
//
//   RETURN_IF_ERROR(WriteHeader(file));           // returns the Status unless it is OK
//   ASSIGN_OR_RETURN(Dataset data, Load(path));   // declares `data`, or returns Load's Status
//
// Both work in any function or lambda whose return type is constructible from absl::Status
// (absl::Status and every absl::StatusOr<T>). ASSIGN_OR_RETURN's first argument is a declaration or
// an existing lvalue; a type with a comma in it needs `auto`.
#ifndef DDPSPAWN_CORE_UTIL_STATUS_MACROS_H_
#define DDPSPAWN_CORE_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#if defined(RETURN_IF_ERROR) || defined(ASSIGN_OR_RETURN)
#error "RETURN_IF_ERROR or ASSIGN_OR_RETURN is already defined by another header"
#endif

#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status ddpspawn_status_macro_status_ = (expr); \
    if (!ddpspawn_status_macro_status_.ok()) {             \
      return ddpspawn_status_macro_status_;                \
    }                                                      \
  } while (false)

#define DDPSPAWN_STATUS_MACRO_CONCAT_INNER_(x, y) x##y
#define DDPSPAWN_STATUS_MACRO_CONCAT_(x, y) DDPSPAWN_STATUS_MACRO_CONCAT_INNER_(x, y)

#define ASSIGN_OR_RETURN(lhs, expr) \
  DDPSPAWN_ASSIGN_OR_RETURN_IMPL_(  \
      DDPSPAWN_STATUS_MACRO_CONCAT_(ddpspawn_status_macro_statusor_, __LINE__), lhs, expr)

// `statusor` is a name and `lhs` a declaration: neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define DDPSPAWN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = *std::move(statusor)
// NOLINTEND(bugprone-macro-parentheses)

#endif  // DDPSPAWN_CORE_UTIL_STATUS_MACROS_H_
