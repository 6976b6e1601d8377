// BatchAmount (see batch_amount.h).
#include "core/train/loop/batch_amount.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddpspawn {

absl::StatusOr<BatchAmount> BatchAmount::Parse(absl::string_view text) {
  int64_t count = 0;
  if (absl::SimpleAtoi(text, &count)) {
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a count of batches must be >= 0, not ", text));
    }
    return Count(count);
  }
  double fraction = 0;
  if (!absl::SimpleAtod(text, &fraction) || !std::isfinite(fraction)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a count of batches (10) or a fraction of them (0.25, 1.0), not '", text, "'"));
  }
  if (fraction < 0 || fraction > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fraction of the batches must be in [0, 1], not ", text,
                     " (a count of batches is an integer)"));
  }
  return Fraction(fraction);
}

absl::StatusOr<int64_t> BatchAmount::Of(int64_t batches, absl::string_view option) const {
  const int64_t taken =
      is_count_ ? std::min(batches, static_cast<int64_t>(value_))
                : static_cast<int64_t>(std::floor(static_cast<double>(batches) * value_));
  if (taken == 0 && value_ > 0 && batches > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s=%s asks for %s of %d batches, which is none; ask for at least one "
                        "batch (a count, or a larger fraction)",
                        option, ToString(), ToString(), batches));
  }
  return taken;
}

std::string BatchAmount::ToString() const {
  if (is_count_) return absl::StrCat(static_cast<int64_t>(value_));
  std::string text;
  for (int digits = 15; digits <= 17; ++digits) {  // the shortest that reads back the same
    text = absl::StrFormat("%.*g", digits, value_);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == value_) break;
  }
  if (!absl::StrContains(text, '.') && !absl::StrContains(text, 'e')) absl::StrAppend(&text, ".0");
  return text;
}

}  // namespace ddpspawn
