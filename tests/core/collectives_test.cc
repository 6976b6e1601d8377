// Every collective, op and dtype against expected values, in real 2- and 4-rank
// jobs (the checks run inside tests/core/test_worker's "collectives" mode).
#include "absl/strings/str_cat.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

// (world size, shared-memory all-reduce on): float sums take shared memory by
// default between a launcher's ranks; DDPSPAWN_SHM_ALLREDUCE=0 sends them
// through Gloo.
class CollectivesTest : public testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(CollectivesTest, EveryOpAndDtype) {
  const auto& [nprocs, shm] = GetParam();
  LaunchSpec spec;
  spec.nprocs = nprocs;
  spec.argv = {"tests/core/test_worker", "collectives"};
  if (!shm) spec.env = {"DDPSPAWN_SHM_ALLREDUCE=0"};
  spec.timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  absl::Status status = (*job)->Wait();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ((*job)->result().value_or(""), absl::StrCat("checked ", nprocs));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest,
                         testing::Combine(testing::Values(2, 3, 4),
                                          testing::Bool()));

// Groups created one after another in the same job each rendezvous on their
// own: a rank that lets go of a group late must not wipe the next group's keys.
TEST(GroupsInTurnTest, EachGroupJoinsAndReduces) {
  LaunchSpec spec;
  spec.nprocs = 2;
  spec.argv = {"tests/core/test_worker", "groups_in_turn"};
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  absl::Status status = (*job)->Wait();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ((*job)->result().value_or(""), "three groups");
}

// With debug checks, mismatched shapes are an error on every rank that names
// each rank's shape (without them Gloo hangs or aborts a rank).
TEST(DebugChecksTest, MismatchedShapesAreNamed) {
  LaunchSpec spec;
  spec.nprocs = 2;
  spec.argv = {"tests/core/test_worker", "mismatch"};
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  absl::Status status = (*job)->Wait();
  ASSERT_TRUE(status.ok()) << status;
  const std::string report = (*job)->result().value_or("");
  EXPECT_THAT(report, testing::HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(report, testing::HasSubstr("rank 0: all_reduce of Float[3]"));
  EXPECT_THAT(report, testing::HasSubstr("rank 1: all_reduce of Float[4]"));
}

}  // namespace
}  // namespace ddpspawn
