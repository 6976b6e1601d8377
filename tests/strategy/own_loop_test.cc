// The own-loop API's traps (tests/strategy/own_loop_main, 2 forked ranks on per-rank data): each
// either works, with the ranks' weights equal after a few steps, or is refused on every rank with
// an error that names the fix.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/run_program.h"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Rank 0's result for `mode`; fails the test when the program failed.
std::string RunMode(const std::string& mode) {
  return ddpspawn::testing::ProgramResult("tests/strategy/own_loop_main " + mode);
}

TEST(OwnLoopTest, StrategySyncBatchnormConvertsInDistribute) {
  // Without the conversion the ranks' running statistics differ after the last step (each
  // normalized its own batch): max_diff > 0. Were the converted layer's tensors new ones, the
  // optimizer (made before) would never move its weight: bn_trained=0.
  EXPECT_EQ(RunMode("sync_bn_strategy"), "converted=1 max_diff=0 bn_trained=1\n");
}

TEST(OwnLoopTest, StrategySyncBatchnormConvertsAModuleHeldByValue) {
  EXPECT_EQ(RunMode("sync_bn_by_value"), "converted=1 max_diff=0 bn_trained=1\n");
}

TEST(OwnLoopTest, BufferRegisteredAfterDistributeFollowsRankZero) {
  EXPECT_EQ(RunMode("buffer_after_wrap"), "buffer=5\n");  // rank 0's 0 + 5, on both ranks
}

TEST(OwnLoopTest, GroupFormRefusesBatchNormUnderSyncBatchnorm) {
  EXPECT_THAT(RunMode("sync_bn_group"),
              AllOf(StartsWith("refused: rank 0: the strategy has sync_batchnorm"),
                    HasSubstr("BatchNorm '1'"), HasSubstr("Distribute(model, strategy)")));
}

TEST(OwnLoopTest, ConvertSyncBatchNormAfterDistributeIsRefused) {
  EXPECT_THAT(RunMode("convert_after_wrap"),
              AllOf(StartsWith("refused: ConvertSyncBatchNorm on a module that a "
                               "DistributedDataParallel already wraps"),
                    HasSubstr("convert before Distribute")));
}

TEST(OwnLoopTest, DistributeUnderFullShardIsRefused) {
  EXPECT_THAT(RunMode("full_shard_distribute"),
              AllOf(StartsWith("refused: Distribute(model, strategy) with sharding_strategy "
                               "full_shard"),
                    HasSubstr("FullShard::Wrap(module, units, strategy.group())")));
}

TEST(OwnLoopTest, DistributeTwiceIsRefused) {
  EXPECT_THAT(RunMode("distribute_twice"),
              StartsWith("refused: this module is already wrapped by a DistributedDataParallel"));
}

TEST(OwnLoopTest, ParameterAddedAfterDistributeIsRefusedAtForward) {
  EXPECT_THAT(RunMode("added_after_wrap"),
              AllOf(StartsWith("refused: rank 0: the module has 7 parameters now, 6 when wrapped"),
                    HasSubstr("before Distribute")));
}

TEST(OwnLoopTest, ModelMovedAfterDistributeIsRefusedAtForward) {
  EXPECT_THAT(RunMode("dtype_after_wrap"),
              StartsWith("refused: rank 0: parameter '0.weight' moved from cpu Float to cpu "
                         "Double after Distribute"));
}

TEST(OwnLoopTest, OptimizerMadeBeforeDistributeTrainsTheSameTensors) {
  EXPECT_EQ(RunMode("optimizer_before"), "max_diff=0\n");
}

TEST(OwnLoopTest, ConditionalNoSyncIsOneLine) {
  EXPECT_EQ(RunMode("no_sync_flag"), "max_diff=0 local_backwards=2\n");
}

TEST(OwnLoopTest, SamplerForAnotherWorldSizeIsRefused) {
  EXPECT_THAT(RunMode("sampler_world"),
              AllOf(StartsWith("refused: PyTorchDistributedSampler for rank 0 of 4 replicas in "
                               "rank 0 of a job of 2"),
                    HasSubstr("world_size()")));
}

// Not refused where it happens: a model with buffers fails at the next step's buffer broadcast,
// which meets the other rank's bucket all-reduce (a model without buffers would pair buckets of
// different steps unnoticed; docs/cpp.md says so).
TEST(OwnLoopTest, NoSyncOnOneRankFailsAtTheNextMismatchedCollective) {
  auto [output, ok] =
      ddpspawn::testing::RunProgram("tests/strategy/own_loop_main no_sync_one_rank");
  EXPECT_FALSE(ok);
  EXPECT_THAT(output,
              AllOf(HasSubstr("the ranks called different collectives"),
                    HasSubstr("rank 0: all_reduce (mean)"), HasSubstr("rank 1: broadcast")));
}

}  // namespace
