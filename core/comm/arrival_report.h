// Which rank holds the others back: how the ranks arrived at the collectives they met at, where
// every rank's arrival is timed on one clock (the shared-memory header of one host's ranks). Per
// rank: how often it arrived last, how much later than the next-latest rank, and how long it waited
// for the last one.
#ifndef DDPSPAWN_CORE_COMM_ARRIVAL_REPORT_H_
#define DDPSPAWN_CORE_COMM_ARRIVAL_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddpspawn {

struct RankArrivals {
  int64_t arrived_last = 0;   // collectives this rank reached after every other rank
  double late_seconds = 0;    // summed over those: its arrival minus the next-latest rank's
  double waited_seconds = 0;  // summed over every collective: the last arrival minus its own
  // Time inside collectives (ProcessGroup::blocked_seconds), when the caller gathered it
  // (ArrivalReport::blocked_known).
  double blocked_seconds = 0;
};

// A snapshot. Plain values; thread-compatible.
struct ArrivalReport {
  // Empty when arrivals were not timed; then `unmeasured` says why.
  std::string measured_by;
  std::string unmeasured;
  int64_t collectives = 0;  // collectives whose arrivals were timed
  std::vector<RankArrivals> ranks;
  // Every rank's blocked_seconds is filled in (fit gathers them on gloo).
  bool blocked_known = false;

  bool measured() const { return !measured_by.empty(); }
  // The rank that arrived last most often (the lowest on a tie); where arrivals are not timed but
  // blocked times are known, the rank blocked least in collectives (the one the others waited for);
  // else -1.
  int Straggler() const;
  // What happened after `earlier` (a snapshot of the same tally).
  ArrivalReport Since(const ArrivalReport& earlier) const;
  // "rank 1 arrived last at 87% of 4,140 collectives, 2.1 ms late on average"; without arrivals but
  // with blocked times, "rank 1 was blocked least in collectives (0.4 s, against 8.1 s for rank 0):
  // the others waited for it (arrivals are not timed: ...)"; else why nothing was measured.
  std::string Summary() const;
  // The report as "straggler..." key=value pairs: straggler (the summary), straggler.measured_by
  // ("shared memory", "time blocked in collectives" or "none"), straggler.collectives,
  // straggler.rank (-1: none), and per rank r straggler.rank<r>.arrived_last, .late_ms (mean over
  // the collectives it was last at), .waited_ms (its total wait) and, when known, .blocked_ms.
  std::vector<std::pair<std::string, std::string>> ToPairs() const;
};

// Thread-safe: one thread records (the collectives' thread), any thread takes snapshots. Owns its
// counts.
class ArrivalTally {
 public:
  ArrivalTally(int world_size, std::string measured_by);
  // One collective: every rank's arrival time, in nanoseconds of one clock.
  void Record(const int64_t* arrival_ns);
  ArrivalReport Snapshot() const;

 private:
  const int world_size_;
  const std::string measured_by_;
  mutable absl::Mutex mutex_;
  int64_t collectives_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<RankArrivals> ranks_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_ARRIVAL_REPORT_H_
