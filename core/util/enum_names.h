// The names of an enum's values, in one table per enum: each Parse...() and ...Name() pair reads
// its table through these two functions, so the names, their aliases and the "expected ..." message
// of a bad name cannot drift apart.
//
//   constexpr NamedValue<Backend> kBackendNames[] = {{"gloo", Backend::kGloo},
//                                                    {"nccl", Backend::kNccl}};
//   absl::string_view BackendName(Backend b) { return NameOf(kBackendNames, b); }
//   absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
//     return ParseName(kBackendNames, "backend", name);
//   }
//
// A value's first entry is its name; later entries for the same value are aliases that parse but
// are neither shown nor listed. Stateless; thread-safe.
#ifndef DDPSPAWN_CORE_UTIL_ENUM_NAMES_H_
#define DDPSPAWN_CORE_UTIL_ENUM_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

template <typename Enum>
struct NamedValue {
  absl::string_view name;
  Enum value;
};

// `value`'s name: its first entry in `table` ("?" for a value with none).
template <typename Enum, size_t N>
absl::string_view NameOf(const NamedValue<Enum> (&table)[N], Enum value) {
  for (const NamedValue<Enum>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

// The value named `name` (a name or an alias); else InvalidArgument "unknown <what> '<name>';
// expected 'a', 'b' or 'c'", listing the names.
template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseName(const NamedValue<Enum> (&table)[N], absl::string_view what,
                               absl::string_view name) {
  for (const NamedValue<Enum>& entry : table) {
    if (entry.name == name) return entry.value;
  }
  std::string names;
  size_t listed = 0;
  size_t count = 0;
  for (size_t i = 0; i < N; ++i) {
    if (NameOf(table, table[i].value) == table[i].name) ++count;
  }
  for (size_t i = 0; i < N; ++i) {
    if (NameOf(table, table[i].value) != table[i].name) continue;  // an alias
    if (listed > 0) absl::StrAppend(&names, listed + 1 == count ? " or " : ", ");
    absl::StrAppend(&names, "'", table[i].name, "'");
    ++listed;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "'; expected ", names));
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_ENUM_NAMES_H_
