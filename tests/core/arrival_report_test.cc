// ArrivalTally and ArrivalReport from arrival times given by hand: who arrived last, by how much,
// how long each rank waited, and the report's forms.
#include "core/comm/arrival_report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

constexpr int64_t kMs = 1000000;  // nanoseconds

TEST(ArrivalTallyTest, TheLastRankIsLateByTheGapToTheNextLatest) {
  ArrivalTally tally(3, "shared memory");
  const int64_t first[3] = {0, 4 * kMs, 1 * kMs};   // rank 1 last, 3 ms after rank 2
  const int64_t second[3] = {0, 6 * kMs, 2 * kMs};  // rank 1 last, 4 ms after rank 2
  const int64_t third[3] = {5 * kMs, 0, 1 * kMs};   // rank 0 last, 4 ms after rank 2
  tally.Record(first);
  tally.Record(second);
  tally.Record(third);
  const ArrivalReport report = tally.Snapshot();
  ASSERT_EQ(report.ranks.size(), 3u);
  EXPECT_EQ(report.collectives, 3);
  EXPECT_EQ(report.Straggler(), 1);
  EXPECT_EQ(report.ranks[1].arrived_last, 2);
  EXPECT_NEAR(report.ranks[1].late_seconds, 0.007, 1e-12);
  EXPECT_EQ(report.ranks[0].arrived_last, 1);
  EXPECT_NEAR(report.ranks[0].late_seconds, 0.004, 1e-12);
  EXPECT_EQ(report.ranks[2].arrived_last, 0);
  // Waits: rank 0 4 + 6 + 0 ms, rank 1 0 + 0 + 5, rank 2 3 + 4 + 4.
  EXPECT_NEAR(report.ranks[0].waited_seconds, 0.010, 1e-12);
  EXPECT_NEAR(report.ranks[1].waited_seconds, 0.005, 1e-12);
  EXPECT_NEAR(report.ranks[2].waited_seconds, 0.011, 1e-12);
  EXPECT_EQ(report.Summary(),
            "rank 1 arrived last at 67% of 3 collectives, 3.5 ms late on average");
}

TEST(ArrivalReportTest, SinceCountsOnlyWhatCameAfter) {
  ArrivalTally tally(2, "shared memory");
  const int64_t rank0_last[2] = {2 * kMs, 0};
  const int64_t rank1_last[2] = {0, 1 * kMs};
  for (int i = 0; i < 1000; ++i) tally.Record(rank0_last);
  const ArrivalReport before = tally.Snapshot();
  for (int i = 0; i < 3140; ++i) tally.Record(rank1_last);
  const ArrivalReport since = tally.Snapshot().Since(before);
  EXPECT_EQ(since.collectives, 3140);
  EXPECT_EQ(since.ranks[0].arrived_last, 0);
  EXPECT_EQ(since.Straggler(), 1);
  EXPECT_EQ(since.Summary(),
            "rank 1 arrived last at 100% of 3,140 collectives, 1 ms late on average");
  // The whole tally: rank 1 most often (3140 of 4140).
  EXPECT_EQ(tally.Snapshot().Summary(),
            "rank 1 arrived last at 76% of 4,140 collectives, 1 ms late on average");
}

TEST(ArrivalReportTest, PairsNameEveryRank) {
  ArrivalTally tally(2, "shared memory");
  const int64_t rank1_last[2] = {0, 2 * kMs};
  tally.Record(rank1_last);
  const auto pairs = tally.Snapshot().ToPairs();
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank", "1")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.measured_by", "shared memory")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.collectives", "1")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank1.arrived_last", "1")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank1.late_ms", "2")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank0.waited_ms", "2")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank0.arrived_last", "0")));
}

TEST(ArrivalReportTest, UnmeasuredSaysWhyAndNamesNoRank) {
  ArrivalReport report;
  report.unmeasured = "gloo over TCP";
  report.ranks.resize(2);
  EXPECT_EQ(report.Straggler(), -1);
  EXPECT_EQ(report.Summary(), "not measured: gloo over TCP");
  EXPECT_THAT(report.ToPairs(), testing::Contains(testing::Pair("straggler.measured_by", "none")));
}

TEST(ArrivalReportTest, WithoutArrivalsTheRankBlockedLeastIsNamed) {
  ArrivalReport report;
  report.unmeasured = "gloo over TCP";
  report.ranks.resize(3);
  report.ranks[0].blocked_seconds = 8.1;
  report.ranks[1].blocked_seconds = 0.4;
  report.ranks[2].blocked_seconds = 7.9;
  EXPECT_EQ(report.Straggler(), -1);  // not gathered yet
  report.blocked_known = true;
  EXPECT_EQ(report.Straggler(), 1);
  EXPECT_EQ(report.Summary(),
            "rank 1 was blocked least in collectives (0.4 s, against 8.1 s for rank 0): the "
            "others waited for it (arrivals are not timed: gloo over TCP)");
  const auto pairs = report.ToPairs();
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank", "1")));
  EXPECT_THAT(pairs, testing::Contains(
                         testing::Pair("straggler.measured_by", "time blocked in collectives")));
  EXPECT_THAT(pairs, testing::Contains(testing::Pair("straggler.rank1.blocked_ms", "400")));
  ArrivalReport earlier = report;
  for (RankArrivals& rank : earlier.ranks) rank.blocked_seconds = 0.1;
  EXPECT_NEAR(report.Since(earlier).ranks[0].blocked_seconds, 8.0, 1e-12);
}

TEST(ArrivalTallyTest, NothingRecordedNamesNoRank) {
  ArrivalTally tally(2, "shared memory");
  EXPECT_EQ(tally.Snapshot().Straggler(), -1);
  EXPECT_EQ(tally.Snapshot().Summary(), "no collective timed (shared memory)");
}

}  // namespace
}  // namespace ddpspawn
