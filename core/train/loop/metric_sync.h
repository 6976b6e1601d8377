// The checks that ride on the loops' reductions of metrics across ranks: fit's training loss and
// weights stay finite (FiniteWatch), and every rank's evaluation step names the same metrics
// (AgreeOnMetricNames).
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_METRIC_SYNC_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_METRIC_SYNC_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace at {
class Tensor;
}  // namespace at

namespace ddpspawn {

class DDPSpawnStrategy;

// A collective: every rank's `names` ("a, b"), gathered, as "rank 0: a, b; rank 1: (none)" when
// they differ, else "".
absl::StatusOr<std::string> EachRanksNamesIfTheyDiffer(DDPSpawnStrategy& strategy,
                                                       const std::string& names);

// The evaluation sums are reduced by position, so every rank must report the same metric names: one
// all-gather of each rank's names, and an error that lists every rank's names when they differ.
absl::Status AgreeOnMetricNames(DDPSpawnStrategy& strategy,
                                const std::map<std::string, double>& sums, absl::string_view step);

// Fit's guard against divergence (TrainerOptions::allow_non_finite_loss): each rank notes its first
// non-finite training loss; at every point where fit reduces the logged loss anyway, one all-reduce
// carries every rank's mean loss and what it saw, so all ranks take the same decision and stop
// together, with no collective of their own and none left waiting. Not thread-safe: one per fit,
// used on the thread that runs it; every rank calls Reduce at the same points.
class FiniteWatch {
 public:
  FiniteWatch(bool allow, std::string last_good)
      : allow_(allow), last_good_(std::move(last_good)) {}

  // This rank's loss of a micro-batch of optimizer step `step` (1-based) in `epoch` (0-based).
  void See(double loss, int64_t epoch, int64_t step) {
    if (allow_ || seen_epoch_ >= 0 || std::isfinite(loss)) return;
    seen_epoch_ = epoch;
    seen_step_ = step;
    seen_value_ = loss;
  }

  // The checkpoint just written from finite weights.
  void Saved(const std::string& checkpoint) { last_good_ = checkpoint; }

  struct Reduced {
    double loss = 0;  // the mean over the ranks of each rank's mean
    // Every rank's `riders`, in rank order.
    std::vector<double> riders;
  };
  // The mean over the ranks of `mean` (this rank's loss), or, unless allowed, the same error on
  // every rank if a rank saw a non-finite loss or (with `weights`, before a checkpoint) holds
  // non-finite weights. `epoch` and `step` say where training is, for the error about weights.
  // `riders` (the same count on every rank) travel in the same all-reduce, for a check of other
  // values that must agree (LoggedSums::Riders).
  absl::StatusOr<Reduced> Reduce(DDPSpawnStrategy& strategy, double mean,
                                 const std::vector<at::Tensor>* weights, int64_t epoch,
                                 int64_t step, const std::vector<double>& riders = {});

 private:
  static constexpr int kSlots = 5;  // mean loss, seen epoch, step, value, finite weights

  static bool AllFinite(const std::vector<at::Tensor>& tensors);

  absl::Status Stop(const std::string& what) const;

  const bool allow_;
  std::string last_good_;
  int64_t seen_epoch_ = -1;  // -1: every loss was finite
  int64_t seen_step_ = 0;
  double seen_value_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_METRIC_SYNC_H_
