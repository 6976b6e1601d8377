// Every collective, op and dtype against expected values, in real 2-, 3- and
// 4-rank jobs (the checks run inside tests/core/test_worker's modes).
#include "absl/strings/str_cat.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

// Runs test_worker `mode` on `nprocs` ranks and returns rank 0's result.
absl::StatusOr<std::string> RunWorkers(int nprocs, const std::string& mode,
                                       std::vector<std::string> env = {}) {
  LaunchSpec spec;
  spec.nprocs = nprocs;
  spec.argv = {"tests/core/test_worker", mode};
  spec.env = std::move(env);
  spec.timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  if (!job.ok()) return job.status();
  if (absl::Status s = (*job)->Start(); !s.ok()) return s;
  if (absl::Status s = (*job)->Wait(); !s.ok()) return s;
  return (*job)->result().value_or("");
}

// (world size, shared-memory all-reduce on): float sums take shared memory by
// default between a launcher's ranks; DDPSPAWN_SHM_ALLREDUCE=0 sends them
// through Gloo.
class CollectivesTest : public testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(CollectivesTest, EveryOpAndDtype) {
  const auto& [nprocs, shm] = GetParam();
  absl::StatusOr<std::string> result = RunWorkers(
      nprocs, "collectives",
      shm ? std::vector<std::string>{} : std::vector<std::string>{"DDPSPAWN_SHM_ALLREDUCE=0"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, absl::StrCat("checked ", nprocs));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest,
                         testing::Combine(testing::Values(2, 3, 4), testing::Bool()));

// A setting with a value ddpspawn does not know is refused when the group is created, naming the
// variable, instead of being read as the default.
TEST(SettingsTest, AnUnknownSwitchValueIsRefused) {
  for (const char* assignment : {"DDPSPAWN_SHM_ALLREDUCE=maybe", "DDPSPAWN_DEBUG=yes"}) {
    absl::StatusOr<std::string> result = RunWorkers(2, "collectives", {assignment});
    ASSERT_FALSE(result.ok()) << assignment;
    EXPECT_THAT(result.status().message(), testing::HasSubstr("': expected 0 or 1"));
    EXPECT_THAT(
        std::string(result.status().message()),
        testing::HasSubstr(std::string(assignment).substr(0, std::string(assignment).find('='))));
  }
}

// Groups created one after another in the same job each rendezvous on their
// own: a rank that lets go of a group late must not wipe the next group's keys.
TEST(GroupsInTurnTest, EachGroupJoinsAndReduces) {
  absl::StatusOr<std::string> result = RunWorkers(2, "groups_in_turn");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, "three groups");
}

// With debug checks, mismatched shapes are an error on every rank that names
// each rank's shape (without them Gloo hangs or aborts a rank).
TEST(DebugChecksTest, MismatchedShapesAreNamed) {
  absl::StatusOr<std::string> report = RunWorkers(2, "mismatch");
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, testing::HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(*report, testing::HasSubstr("rank 0: all_reduce of Float[3]"));
  EXPECT_THAT(*report, testing::HasSubstr("rank 1: all_reduce of Float[4]"));
}

}  // namespace
}  // namespace ddpspawn
