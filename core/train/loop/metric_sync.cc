// Fit's finite-loss guard and the evaluation's metric-name agreement (see metric_sync.h).
#include "core/train/loop/metric_sync.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::StatusOr<std::string> EachRanksNamesIfTheyDiffer(DDPSpawnStrategy& strategy,
                                                       const std::string& names) {
  if (strategy.group() == nullptr || strategy.world_size() == 1) return std::string();
  ASSIGN_OR_RETURN(std::vector<std::string> all, strategy.group()->AllGatherBytes(names));
  if (std::all_of(all.begin(), all.end(), [&](const std::string& n) { return n == all[0]; })) {
    return std::string();
  }
  std::string each;
  for (size_t r = 0; r < all.size(); ++r) {
    absl::StrAppend(&each, r == 0 ? "" : "; ", "rank ", r, ": ",
                    all[r].empty() ? "(none)" : all[r]);
  }
  return each;
}

absl::Status AgreeOnMetricNames(DDPSpawnStrategy& strategy,
                                const std::map<std::string, double>& sums, absl::string_view step) {
  std::string names;
  for (const auto& [name, sum] : sums) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  ASSIGN_OR_RETURN(const std::string each, EachRanksNamesIfTheyDiffer(strategy, names));
  if (each.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the ranks' ", step, " returned different metric names (", each,
                   "); every rank's ", step, " must return the same names, whatever its data"));
}

absl::StatusOr<FiniteWatch::Reduced> FiniteWatch::Reduce(DDPSpawnStrategy& strategy, double mean,
                                                         const std::vector<at::Tensor>* weights,
                                                         int64_t epoch, int64_t step,
                                                         const std::vector<double>& riders) {
  // Every rank fills its own slots and the sum gathers them (x + 0 is x, NaN included): the
  // shared-memory all-reduce the logged loss took.
  const int world = strategy.world_size(), rank = strategy.global_rank();
  const bool finite_weights = weights == nullptr || allow_ || AllFinite(*weights);
  const int width = kSlots + static_cast<int>(riders.size());
  std::vector<double> slots(static_cast<size_t>(world) * width, 0.0);
  double* mine = &slots[static_cast<size_t>(rank) * width];
  mine[0] = mean;
  mine[1] = static_cast<double>(seen_epoch_);
  mine[2] = static_cast<double>(seen_step_);
  mine[3] = seen_value_;
  mine[4] = finite_weights ? 1.0 : 0.0;
  std::copy(riders.begin(), riders.end(), mine + kSlots);
  ASSIGN_OR_RETURN(at::Tensor summed,
                   strategy.Reduce(at::tensor(slots, at::kDouble), ReduceOp::kSum));
  at::Tensor all = summed.to(at::kCPU).reshape({world, width});
  auto a = all.accessor<double, 2>();
  Reduced reduced;
  for (int r = 0; r < world; ++r) {
    reduced.loss += a[r][0];
    for (int i = kSlots; i < width; ++i) reduced.riders.push_back(a[r][i]);
  }
  reduced.loss /= world;
  if (allow_) return reduced;
  // The earliest non-finite loss (the lowest rank among equals).
  int first = -1;
  for (int r = 0; r < world; ++r) {
    if (a[r][1] < 0) continue;
    if (first < 0 || a[r][1] < a[first][1] || (a[r][1] == a[first][1] && a[r][2] < a[first][2]))
      first = r;
  }
  if (first >= 0) {
    return Stop(absl::StrFormat("training loss became %s at epoch %d, step %d (rank %d)",
                                absl::StrCat(a[first][3]), static_cast<int64_t>(a[first][1]) + 1,
                                static_cast<int64_t>(a[first][2]), first));
  }
  for (int r = 0; r < world; ++r) {
    if (a[r][4] == 0) {
      return Stop(absl::StrFormat(
          "the weights became non-finite (inf or nan) by epoch %d, step %d (rank %d), with a "
          "finite training loss",
          epoch + 1, step, r));
    }
  }
  return reduced;
}

bool FiniteWatch::AllFinite(const std::vector<at::Tensor>& tensors) {
  c10::NoGradGuard no_grad;
  for (const at::Tensor& t : tensors) {
    if (!at::isfinite(t).all().item<bool>()) return false;
  }
  return true;
}

absl::Status FiniteWatch::Stop(const std::string& what) const {
  return absl::AbortedError(
      absl::StrCat(what, "; ",
                   last_good_.empty() ? "no checkpoint was written before it"
                                      : absl::StrCat("the last good checkpoint is ", last_good_),
                   "; pass allow_non_finite_loss=true to go on (or lower the learning rate)"));
}

}  // namespace ddpspawn
