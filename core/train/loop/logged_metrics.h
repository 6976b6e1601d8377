// What a module logs from its training steps (LightningModule::Log), summed on each rank between
// two of fit's log points and reduced across the ranks there: the mean over the ranks with
// sync_dist, rank 0's without, the same value on every rank either way.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_LOGGED_METRICS_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_LOGGED_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/module.h"

namespace ddpspawn {

class DDPSpawnStrategy;

// Not thread-safe: one per window (or epoch) of one fit, on its thread.
class LoggedSums {
 public:
  // How many numbers Riders() returns.
  static constexpr int kRiders = 2;

  // InvalidArgument for an empty name, fit's own "train_loss", or a name logged both with and
  // without sync_dist.
  absl::Status Add(const LoggedValue& value);
  void Clear() { sums_.clear(); }

  // Two numbers that ride on fit's loss reduction (FiniteWatch::Reduce): how many names this rank
  // logged, and a checksum of them and their sync_dist, so that the ranks learn whether they logged
  // the same with no collective of their own.
  std::vector<double> Riders() const;

  // Collective, at a log point, given every rank's Riders() (kRiders per rank, in rank order):
  // nothing when no rank logged; else each name's value (see the file comment), or, on every rank,
  // an error that lists each rank's names when they differ.
  absl::StatusOr<std::map<std::string, double>> Reduce(
      DDPSpawnStrategy& strategy, const std::vector<double>& every_ranks_riders) const;

 private:
  struct Sum {
    double sum = 0;
    int64_t count = 0;
    bool sync_dist = false;
  };
  // "acc, f1 (sync_dist)": the names and flags, as the checksum covers them.
  std::string Describe() const;

  std::map<std::string, Sum> sums_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_LOGGED_METRICS_H_
