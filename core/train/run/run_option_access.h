// How each run option reads its value into a RunConfig and shows its default: the kinds of option
// (range-checked integers, text, flags, finite numbers, enum names, fixed choices) that
// run_options.cc's table is written in. Internal to that table; stateless.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTION_ACCESS_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTION_ACCESS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/train/loop/batch_amount.h"
#include "core/train/run/run_options.h"
#include "core/util/status_macros.h"

namespace ddpspawn::option_access {

// How one option reads its value into a RunConfig and shows its default: `set` returns "expected
// ..." on a bad value (ParseRunConfig names the option and the value); `show` gives the field's
// value as text ("" when there is nothing to show).
using Setter = std::function<absl::Status(RunConfig&, const std::string&)>;
using Shower = std::function<std::string(const RunConfig&)>;
struct Access {
  Setter set;
  Shower show;
  // An option with a fixed set of values: them, "a|b|c", from the enum's name table (Choice) or the
  // list (OneOf); the option table shows them as the option's values. "" for the others.
  std::string choices = "";
};

inline absl::Status Expected(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("expected ", what));
}

// The field `field` (a member pointer or a function returning a reference) designates in `c`;
// `show` reads it from a const config.
template <typename Field>
auto& FieldOf(Field field, const RunConfig& c) {
  return std::invoke(field, const_cast<RunConfig&>(c));
}

// Whether `value` is representable in T.
template <typename T>
constexpr bool Fits(int64_t value) {
  if constexpr (std::is_signed_v<T>) {
    return value >= std::numeric_limits<T>::min() && value <= std::numeric_limits<T>::max();
  } else {
    return value >= 0 && static_cast<uint64_t>(value) <= std::numeric_limits<T>::max();
  }
}

// An integer option in [kMin, kMax]: parsed into 64 bits and range-checked before it is narrowed to
// its field (so 4294967298 is an error, not 2 in an int).
template <int64_t kMin, int64_t kMax, typename Field>
Access Integer(Field field) {
  using T = std::remove_reference_t<std::invoke_result_t<Field, RunConfig&>>;
  static_assert(std::is_integral_v<T> && kMin <= kMax, "an integer field and a range");
  static_assert(Fits<T>(kMin) && Fits<T>(kMax), "the range must fit the field's type");
  return {[field](RunConfig& c, const std::string& v) -> absl::Status {
            int64_t parsed = 0;
            if (!absl::SimpleAtoi(v, &parsed) || parsed < kMin || parsed > kMax) {
              return Expected(absl::StrCat("an integer in [", kMin, ", ", kMax, "]"));
            }
            std::invoke(field, c) = static_cast<T>(parsed);
            return absl::OkStatus();
          },
          [field](const RunConfig& c) { return absl::StrCat(FieldOf(field, c)); }};
}

template <typename Field>
Access Text(Field field) {
  return {[field](RunConfig& c, const std::string& v) {
            std::invoke(field, c) = v;
            return absl::OkStatus();
          },
          [field](const RunConfig& c) { return FieldOf(field, c); }};
}

inline absl::StatusOr<bool> ParseBool(const std::string& v) {
  std::string lower = absl::AsciiStrToLower(v);
  if (lower == "1" || lower == "true" || lower == "yes" || lower.empty()) return true;
  if (lower == "0" || lower == "false" || lower == "no") return false;
  return Expected("true or false");
}

template <typename Field>
Access Flag(Field field) {
  return {
      [field](RunConfig& c, const std::string& v) -> absl::Status {
        ASSIGN_OR_RETURN(std::invoke(field, c), ParseBool(v));
        return absl::OkStatus();
      },
      [field](const RunConfig& c) -> std::string { return FieldOf(field, c) ? "true" : "false"; }};
}

// A number of batches (core/train/loop/batch_amount.h): a count, or a fraction of them.
template <typename Field>
Access Batches(Field field) {
  return {[field](RunConfig& c, const std::string& v) -> absl::Status {
            absl::StatusOr<BatchAmount> amount = BatchAmount::Parse(v);
            if (!amount.ok()) {
              return Expected("a count of batches (10) or a fraction of them (0.25, 1.0)");
            }
            std::invoke(field, c) = *amount;
            return absl::OkStatus();
          },
          [field](const RunConfig& c) { return FieldOf(field, c).ToString(); }};
}

// A floating-point option: a finite number >= minimum. SimpleAtod reads "inf", "nan" and 1e400 (as
// inf); no option means any of them.
template <typename Field>
Access Number(Field field, double minimum) {
  return {[field, minimum](RunConfig& c, const std::string& v) -> absl::Status {
            double parsed = 0;
            if (!absl::SimpleAtod(v, &parsed) || !std::isfinite(parsed) || parsed < minimum) {
              return Expected(absl::StrCat("a finite number >= ", minimum));
            }
            std::invoke(field, c) = parsed;
            return absl::OkStatus();
          },
          [field](const RunConfig& c) { return absl::StrCat(FieldOf(field, c)); }};
}

// The enum an option's field holds: the field's type, or what its std::optional holds.
template <typename T>
struct EnumOf {
  using type = T;
};
template <typename T>
struct EnumOf<std::optional<T>> {
  using type = T;
};

// An option that names one value of an enum: `parse` reads the names, `name` shows them, and the
// option's choices are the names of the enum's values, read through `name` from 0 up to the first
// value without one (ddpspawn's enums have consecutive values from 0; util/enum_names.h), so they
// are the enum table's and cannot drift from it. std::optional fields show nothing while unset.
template <typename Field, typename Parse, typename Name>
Access Choice(Field field, Parse parse, Name name) {
  using Enum = typename EnumOf<
      std::remove_cv_t<std::remove_reference_t<std::invoke_result_t<Field, RunConfig&>>>>::type;
  std::string choices;
  for (int value = 0;; ++value) {
    const absl::string_view shown = name(static_cast<Enum>(value));
    if (shown == "?") break;
    absl::StrAppend(&choices, value == 0 ? "" : "|", shown);
  }
  return {[field, parse](RunConfig& c, const std::string& v) -> absl::Status {
            ASSIGN_OR_RETURN(std::invoke(field, c), parse(v));
            return absl::OkStatus();
          },
          [field, name](const RunConfig& c) -> std::string {
            const auto& value = FieldOf(field, c);
            if constexpr (std::is_constructible_v<bool, decltype(value)>) {
              return value ? std::string(name(*value)) : "";
            } else {
              return std::string(name(value));
            }
          },
          choices};
}

// A text option with a fixed set of values.
template <typename Field>
Access OneOf(Field field, const std::vector<std::string>& values) {
  return {[field, values](RunConfig& c, const std::string& v) -> absl::Status {
            if (std::find(values.begin(), values.end(), v) == values.end()) {
              return Expected(absl::StrJoin(values, ", "));
            }
            std::invoke(field, c) = v;
            return absl::OkStatus();
          },
          [field](const RunConfig& c) { return FieldOf(field, c); }, absl::StrJoin(values, "|")};
}

}  // namespace ddpspawn::option_access

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTION_ACCESS_H_
