// Lightning's EarlyStopping: fit stops when a monitored metric has not improved by more than
// min_delta in `patience` checks in a row (or became non-finite), on every rank together, and says
// so.
#ifndef DDPSPAWN_CORE_TRAIN_CALLBACKS_EARLY_STOPPING_H_
#define DDPSPAWN_CORE_TRAIN_CALLBACKS_EARLY_STOPPING_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "core/train/callbacks/callback.h"

namespace ddpspawn {

struct EarlyStoppingOptions {
  std::string monitor;  // empty: no early stopping
  MonitorMode mode = MonitorMode::kAuto;
  int patience = 3;          // checks without improvement before stopping
  double min_delta = 0.0;    // an improvement is a change by more than this
  bool check_finite = true;  // a nan/inf monitored value stops fit at once
};

// What the options allow, before any rank starts (mode resolved, ranges).
absl::Status CheckEarlyStoppingOptions(const EarlyStoppingOptions& options);

// Checks once per epoch in which the monitored metric was logged, at the epoch's end (after its
// validation). Thread-compatible; one fit at a time.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);

  std::string name() const override { return "EarlyStopping"; }
  bool RunsInFastDevRun() const override { return false; }
  absl::Status OnTrainEpochEnd(CallbackContext& context) override;
  std::string OnSaveCheckpoint() const override;
  absl::Status OnLoadCheckpoint(absl::string_view state) override;

  int wait_count() const { return wait_count_; }
  double best_score() const { return best_; }

 private:
  EarlyStoppingOptions options_;
  MonitorMode mode_;  // resolved
  double best_;
  int64_t best_epoch_ = -1;
  int wait_count_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_CALLBACKS_EARLY_STOPPING_H_
