// Arrival tallies and their report (see arrival_report.h).
#include "core/comm/arrival_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddpspawn {
namespace {

// 4140 -> "4,140".
std::string WithThousands(int64_t value) {
  std::string digits = absl::StrCat(value);
  std::string out;
  const size_t first = digits.size() % 3 == 0 ? 3 : digits.size() % 3;
  out = digits.substr(0, first);
  for (size_t i = first; i < digits.size(); i += 3) absl::StrAppend(&out, ",", digits.substr(i, 3));
  return out;
}

}  // namespace

int ArrivalReport::Straggler() const {
  if (!measured()) {
    if (!blocked_known || ranks.size() < 2) return -1;
    int least = 0;
    for (size_t r = 1; r < ranks.size(); ++r) {
      if (ranks[r].blocked_seconds < ranks[least].blocked_seconds) least = static_cast<int>(r);
    }
    return least;
  }
  int slowest = -1;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].arrived_last > 0 &&
        (slowest < 0 || ranks[r].arrived_last > ranks[slowest].arrived_last)) {
      slowest = static_cast<int>(r);
    }
  }
  return slowest;
}

ArrivalReport ArrivalReport::Since(const ArrivalReport& earlier) const {
  ArrivalReport delta = *this;
  if (earlier.ranks.size() != ranks.size()) return delta;
  delta.collectives -= earlier.collectives;
  for (size_t r = 0; r < ranks.size(); ++r) {
    delta.ranks[r].arrived_last -= earlier.ranks[r].arrived_last;
    delta.ranks[r].late_seconds -= earlier.ranks[r].late_seconds;
    delta.ranks[r].waited_seconds -= earlier.ranks[r].waited_seconds;
    delta.ranks[r].blocked_seconds -= earlier.ranks[r].blocked_seconds;
  }
  delta.blocked_known = blocked_known && earlier.blocked_known;
  return delta;
}

std::string ArrivalReport::Summary() const {
  const int slowest = Straggler();
  if (!measured()) {
    if (slowest < 0) return absl::StrCat("not measured: ", unmeasured);
    int most = slowest == 0 ? 1 : 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (ranks[r].blocked_seconds > ranks[most].blocked_seconds) most = static_cast<int>(r);
    }
    return absl::StrFormat(
        "rank %d was blocked least in collectives (%.3g s, against %.3g s for rank %d): the "
        "others waited for it (arrivals are not timed: %s)",
        slowest, ranks[slowest].blocked_seconds, ranks[most].blocked_seconds, most, unmeasured);
  }
  if (slowest < 0) return absl::StrCat("no collective timed (", measured_by, ")");
  const RankArrivals& rank = ranks[slowest];
  return absl::StrFormat(
      "rank %d arrived last at %.0f%% of %s collectives, %.3g ms late on average", slowest,
      100.0 * rank.arrived_last / collectives, WithThousands(collectives),
      1e3 * rank.late_seconds / rank.arrived_last);
}

std::vector<std::pair<std::string, std::string>> ArrivalReport::ToPairs() const {
  std::vector<std::pair<std::string, std::string>> pairs = {
      {"straggler", Summary()},
      {"straggler.measured_by", measured()      ? measured_by
                                : blocked_known ? "time blocked in collectives"
                                                : "none"},
      {"straggler.collectives", absl::StrCat(collectives)},
      {"straggler.rank", absl::StrCat(Straggler())},
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankArrivals& rank = ranks[r];
    const std::string prefix = absl::StrCat("straggler.rank", r, ".");
    pairs.emplace_back(prefix + "arrived_last", absl::StrCat(rank.arrived_last));
    pairs.emplace_back(
        prefix + "late_ms",
        absl::StrFormat("%.6g",
                        rank.arrived_last > 0 ? 1e3 * rank.late_seconds / rank.arrived_last : 0.0));
    pairs.emplace_back(prefix + "waited_ms", absl::StrFormat("%.6g", 1e3 * rank.waited_seconds));
    if (blocked_known) {
      pairs.emplace_back(prefix + "blocked_ms",
                         absl::StrFormat("%.6g", 1e3 * rank.blocked_seconds));
    }
  }
  return pairs;
}

ArrivalTally::ArrivalTally(int world_size, std::string measured_by)
    : world_size_(world_size), measured_by_(std::move(measured_by)), ranks_(world_size) {}

void ArrivalTally::Record(const int64_t* arrival_ns) {
  if (world_size_ < 2) return;
  int last = 0;
  for (int r = 1; r < world_size_; ++r) {
    if (arrival_ns[r] > arrival_ns[last]) last = r;
  }
  int64_t next_latest = INT64_MIN;
  for (int r = 0; r < world_size_; ++r) {
    if (r != last) next_latest = std::max(next_latest, arrival_ns[r]);
  }
  absl::MutexLock lock(&mutex_);
  ++collectives_;
  ranks_[last].arrived_last += 1;
  ranks_[last].late_seconds += 1e-9 * static_cast<double>(arrival_ns[last] - next_latest);
  for (int r = 0; r < world_size_; ++r) {
    ranks_[r].waited_seconds += 1e-9 * static_cast<double>(arrival_ns[last] - arrival_ns[r]);
  }
}

ArrivalReport ArrivalTally::Snapshot() const {
  ArrivalReport report;
  report.measured_by = measured_by_;
  absl::MutexLock lock(&mutex_);
  report.collectives = collectives_;
  report.ranks = ranks_;
  return report;
}

}  // namespace ddpspawn
