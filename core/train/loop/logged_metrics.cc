// LoggedSums (see logged_metrics.h).
#include "core/train/loop/logged_metrics.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/loop/metric_sync.h"
#include "core/util/crc32.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::Status LoggedSums::Add(const LoggedValue& value) {
  if (value.name.empty()) return absl::InvalidArgumentError("Log() needs a metric name");
  if (value.name == "train_loss") {
    return absl::InvalidArgumentError(
        "Log(\"train_loss\"): the name is fit's own (the training step's loss)");
  }
  auto [it, added] = sums_.try_emplace(value.name);
  if (!added && it->second.sync_dist != value.sync_dist) {
    return absl::InvalidArgumentError(
        absl::StrCat("Log(\"", value.name, "\") was called both with and without sync_dist"));
  }
  it->second.sum += value.value;
  ++it->second.count;
  it->second.sync_dist = value.sync_dist;
  return absl::OkStatus();
}

std::string LoggedSums::Describe() const {
  std::string names;
  for (const auto& [name, sum] : sums_) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", name, sum.sync_dist ? " (sync_dist)" : "");
  }
  return names;
}

std::vector<double> LoggedSums::Riders() const {
  return {static_cast<double>(sums_.size()), static_cast<double>(Crc32(Describe()))};
}

absl::StatusOr<std::map<std::string, double>> LoggedSums::Reduce(
    DDPSpawnStrategy& strategy, const std::vector<double>& every_ranks_riders) const {
  const int world = strategy.world_size(), rank = strategy.global_rank();
  bool same = true, any = false;
  for (int r = 0; r < world; ++r) {
    const double* riders = &every_ranks_riders[static_cast<size_t>(r) * kRiders];
    same = same && std::equal(riders, riders + kRiders, every_ranks_riders.begin());
    any = any || riders[0] > 0;
  }
  std::map<std::string, double> reduced;
  if (!any) return reduced;
  if (!same) {
    ASSIGN_OR_RETURN(const std::string each, EachRanksNamesIfTheyDiffer(strategy, Describe()));
    return absl::InvalidArgumentError(absl::StrCat(
        "the ranks' training steps logged different metrics since the last log point (", each,
        "); every rank must Log() the same names, each always with or always without "
        "sync_dist"));
  }
  // Each rank's means in its own row; the sum gathers them.
  const size_t names = sums_.size();
  std::vector<double> slots(static_cast<size_t>(world) * names, 0.0);
  size_t column = 0;
  for (const auto& [name, sum] : sums_) {
    slots[static_cast<size_t>(rank) * names + column++] = sum.sum / static_cast<double>(sum.count);
  }
  ASSIGN_OR_RETURN(at::Tensor summed,
                   strategy.Reduce(at::tensor(slots, at::kDouble), ReduceOp::kSum));
  at::Tensor all = summed.to(at::kCPU).reshape({world, static_cast<int64_t>(names)});
  auto means = all.accessor<double, 2>();
  column = 0;
  for (const auto& [name, sum] : sums_) {
    double value = means[0][static_cast<int64_t>(column)];
    if (sum.sync_dist) {
      for (int r = 1; r < world; ++r) value += means[r][static_cast<int64_t>(column)];
      value /= world;
    }
    reduced[name] = value;
    ++column;
  }
  return reduced;
}

}  // namespace ddpspawn
