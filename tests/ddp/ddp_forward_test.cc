// DdpModule, torch's DDP forward in C++: the natural loop keeps every rank's buffers on rank 0's,
// for a module holder and a module held by value; a loop that skips PrepareForward is refused at
// its first backward, on every rank. (The checks run in tests/ddp/forward_worker.)
#include <memory>
#include <string>

#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> RunWorker(const std::string& mode) {
  LaunchSpec spec;
  spec.nprocs = 2;
  spec.argv = {"tests/ddp/forward_worker", mode};
  spec.timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  if (!job.ok()) return job.status();
  if (absl::Status started = (*job)->Start(); !started.ok()) return started;
  if (absl::Status ended = (*job)->Wait(); !ended.ok()) return ended;
  return (*job)->result().value_or("");
}

TEST(DdpForwardTest, HolderTakesRankZerosBuffersBeforeEachForward) {
  absl::StatusOr<std::string> result = RunWorker("holder");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, "buffers_checked=4");
}

TEST(DdpForwardTest, ModuleHeldByValueTakesRankZerosBuffers) {
  absl::StatusOr<std::string> result = RunWorker("by_value");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, "buffers_checked=4");
}

TEST(DdpForwardTest, BackwardWithoutPrepareForwardIsRefused) {
  absl::StatusOr<std::string> result = RunWorker("forgot");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(*result, HasSubstr("refused: rank 0: a backward through DistributedDataParallel "
                                 "started without its forward"));
  EXPECT_THAT(*result, HasSubstr("PrepareForward()"));
}

}  // namespace
}  // namespace ddpspawn
