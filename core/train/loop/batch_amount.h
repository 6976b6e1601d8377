// BatchAmount: how many batches of a loader an option asks for, as Lightning's limit_*_batches,
// overfit_batches and val_check_interval take them: a count of batches (an integer, "10"), or a
// fraction of the loader's batches (a number with a point or an exponent, "0.25", "1.0").
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_BATCH_AMOUNT_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_BATCH_AMOUNT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// A plain value.
class BatchAmount {
 public:
  static BatchAmount All() { return BatchAmount(false, 1.0); }
  static BatchAmount Count(int64_t batches) {
    return BatchAmount(true, static_cast<double>(batches));
  }
  static BatchAmount Fraction(double fraction) { return BatchAmount(false, fraction); }
  // A count >= 0, or a fraction in [0, 1]; anything else is InvalidArgument.
  static absl::StatusOr<BatchAmount> Parse(absl::string_view text);

  // How many of a loader's `batches`: min(count, batches), or floor(batches * fraction). A request
  // for some batches that comes to none of a loader that has some (0.1 of 5 batches) is
  // InvalidArgument, naming `option`, as Lightning refuses it.
  absl::StatusOr<int64_t> Of(int64_t batches, absl::string_view option) const;

  bool is_zero() const { return value_ == 0; }
  bool is_count() const { return is_count_; }
  int64_t count() const { return is_count_ ? static_cast<int64_t>(value_) : 0; }
  bool is_all() const { return !is_count_ && value_ == 1.0; }
  // "10" or "0.25"; Parse(ToString()) gives this amount back.
  std::string ToString() const;

 private:
  BatchAmount(bool is_count, double value) : is_count_(is_count), value_(value) {}
  bool is_count_;
  double value_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_BATCH_AMOUNT_H_
