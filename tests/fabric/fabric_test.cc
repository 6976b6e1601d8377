// Fabric's verbs: tests/fabric/fabric_main's 2 forked ranks, and what is refused before any rank
// starts or outside one.
#include "core/fabric/fabric.h"

#include <stdlib.h>

#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "core/model/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/run_program.h"

namespace ddpspawn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Rank 0's result line for `args`; fails the test when the program failed.
std::string RunMode(const std::string& args) {
  std::string result = testing::ProgramResult("tests/fabric/fabric_main " + args);
  return result.substr(0, result.find('\n'));
}

std::string TempDir() {
  std::string dir =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/fabric.XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

double Field(const std::string& result, const std::string& name) {
  for (absl::string_view field : absl::StrSplit(result, ' ')) {
    if (absl::StartsWith(field, name + "="))
      return std::stod(std::string(field.substr(name.size() + 1)));
  }
  ADD_FAILURE() << "no " << name << " in " << result;
  return -1;
}

TEST(FabricTest, TwoRanksTrainAsOneProcessOnTheWholeBatch) {
  // Each rank sees half of every batch; averaged gradients make both ranks' weights those of one
  // process on the whole batch. Without DDP each rank would follow its own half's gradients.
  const std::string result = RunMode("train");
  EXPECT_LE(Field(result, "max_diff"), 1e-6) << result;
  // The clipped norm is of the averaged gradients: the whole batch's norm, on every step (relative
  // difference).
  EXPECT_LE(Field(result, "norm_diff"), 1e-6) << result;
  EXPECT_EQ(Field(result, "clipped"), 4) << result;  // every step's norm was above the bound
  // 8 backwards, of which the 4 under NoBackwardSync(true) did not synchronize.
  EXPECT_EQ(Field(result, "synced"), 4) << result;
}

// The sharded optimizers under SetupOptimizer(): the loop of TwoRanksTrainAsOneProcess... with
// ZeRO-2 (each rank steps its rows of every parameter, and keeps no whole gradient) and ZeRO-1
// (each rank steps whole parameters: Linear(4, 8)'s weight on rank 0, the rest on rank 1). The
// clipped norm spans every rank's rows; the checkpoint holds the whole optimizer state.
void ExpectShardedTrainsAsOneProcess(const std::string& mode, int full_grads,
                                     const std::string& shard_elements) {
  // Observed: weights and momentum within 7.5e-9 (the averages' order), the norms' relative
  // difference 1.1e-7; 1e-7 is about one float ulp of a weight near 1.
  const std::string result = RunMode(mode + " " + TempDir());
  EXPECT_LE(Field(result, "max_diff"), 1e-7) << result;
  EXPECT_LE(Field(result, "norm_diff"), 1e-6) << result;
  EXPECT_EQ(Field(result, "clipped"), 4) << result;
  EXPECT_EQ(Field(result, "full_grads"), full_grads) << result;
  EXPECT_THAT(result, HasSubstr(" shard_elements=" + shard_elements + " "));
  // Loaded into a plain model and SGD: the weights and momentum of one process on every batch.
  EXPECT_LE(Field(result, "loaded_diff"), 1e-7) << result;
  EXPECT_LE(Field(result, "momentum_diff"), 1e-7) << result;
}

TEST(FabricTest, ShardGradOpTrainsAsOneProcessAndSavesTheWholeState) {
  // 49 elements: rows 0-3 of Linear(4, 8) (16 + 4) and Linear(8, 1)'s one row (8 + 1) on rank 0.
  ExpectShardedTrainsAsOneProcess("shard_grad_op", 0, "29,20");
}

TEST(FabricTest, ZeroRedundancyOptimizerTrainsAsOneProcessAndSavesTheWholeState) {
  ExpectShardedTrainsAsOneProcess("zero1", 4, "32,17");
}

TEST(FabricTest, APlainOptimizerUnderShardGradOpIsRefused) {
  // It would never see the gradients (each rank keeps its rows only) and step nothing.
  auto [output, ok] = testing::RunProgram("tests/fabric/fabric_main plain_under_shard_grad_op");
  EXPECT_FALSE(ok);
  EXPECT_THAT(output, AllOf(HasSubstr("failed: "), HasSubstr("FAILED_PRECONDITION"),
                            HasSubstr("Backward: under sharding_strategy shard_grad_op"),
                            HasSubstr("SetupOptimizer(model, make)")))
      << output;
}

TEST(FabricTest, ZeroOneWithPostLocalSgdIsRefused) {
  FabricOptions options;
  options.zero_redundancy_optimizer = true;
  options.strategy.ddp_comm_hook = CommHookKind::kPostLocalSgd;
  absl::StatusOr<std::string> result = Fabric(options).Launch([](Fabric&) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("post_localsgd do not combine"));
}

TEST(FabricTest, ZeroOneWithShardGradOpIsRefused) {
  FabricOptions options;
  options.strategy.sharding_strategy = ShardingStrategy::kShardGradOp;
  options.zero_redundancy_optimizer = true;
  absl::StatusOr<std::string> result = Fabric(options).Launch([](Fabric&) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("zero_redundancy_optimizer"));
}

TEST(FabricTest, Collectives) {
  EXPECT_EQ(RunMode("collectives"), "mean=0.5 sum=1 gathered=0,1 from_rank_1=1 bytes=rank1");
}

TEST(FabricTest, SaveWritesATrainerCheckpointThatLoadRestores) {
  const std::string dir = TempDir();
  EXPECT_EQ(RunMode("save_load " + dir), "step=2 max_diff=0 momentum_diff=0");
  std::ifstream file(dir + "/fabric.ckpt", std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  // The Trainer's format: its weights and training state read without a module.
  absl::StatusOr<NamedTensors> weights = ReadCheckpointWeights(bytes.str());
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->size(), 4u);
  EXPECT_EQ((*weights)[0].first, "0.weight");
  absl::StatusOr<TrainingState> state = ReadCheckpointTrainingState(bytes.str());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->global_step, 2);
  EXPECT_EQ(state->world_size, 2);
}

TEST(FabricTest, LogWritesRankZerosValuesOnly) {
  const std::string dir = TempDir();
  EXPECT_EQ(RunMode("log " + dir), "logged");
  std::ifstream file(dir + "/metrics.csv");
  std::stringstream csv;
  csv << file.rdbuf();
  EXPECT_EQ(csv.str(), "epoch,step,name,value\n0,0,value,0\n0,1,value,1\n0,2,value,2\n");
}

TEST(FabricTest, Bf16MixedRunsTheForwardUnderAutocast) {
  EXPECT_EQ(RunMode("autocast"), "dtype=BFloat16");
}

TEST(FabricTest, ANonFiniteNormFailsTheJobNamingTheRank) {
  auto [output, ok] = testing::RunProgram("tests/fabric/fabric_main nan_on_rank_1");
  EXPECT_FALSE(ok);
  EXPECT_THAT(output, AllOf(HasSubstr("failed: "), HasSubstr("rank 1"),
                            HasSubstr("ClipGradients: the gradient of the optimizer's parameter 0 "
                                      "of 4 (shape [8, 4]) is not finite")))
      << output;
}

TEST(FabricTest, SixteenMixedIsRefusedBeforeAnyRankStarts) {
  FabricOptions options;
  options.devices = 2;
  options.precision = Precision::k16Mixed;
  Fabric fabric(options);
  bool ran = false;
  absl::StatusOr<std::string> result = fabric.Launch([&](Fabric&) { ran = true; });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(result.status().message(), HasSubstr("16-mixed"));
  EXPECT_FALSE(ran);
}

TEST(FabricTest, FullShardIsRefused) {
  FabricOptions options;
  options.strategy.sharding_strategy = ShardingStrategy::kFullShard;
  absl::StatusOr<std::string> result = Fabric(options).Launch([](Fabric&) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(result.status().message(), HasSubstr("full_shard"));
}

TEST(FabricTest, ForkserverIsRefused) {
  FabricOptions options;
  options.strategy.start_method = StartMethod::kForkserver;
  absl::StatusOr<std::string> result = Fabric(options).Launch([](Fabric&) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(result.status().message(), HasSubstr("ServeForksIfForkserver"));
}

TEST(FabricTest, VerbsOutsideARankThrow) {
  Fabric fabric(2);
  const at::Tensor one = at::ones({1});
  const std::vector<std::pair<std::string, std::function<void()>>> verbs = {
      {"Sampler", [&] { fabric.Sampler(10); }},      {"Backward", [&] { fabric.Backward(one); }},
      {"AllReduce", [&] { fabric.AllReduce(one); }}, {"Broadcast", [&] { fabric.Broadcast(one); }},
      {"Barrier", [&] { fabric.Barrier(); }},        {"Log", [&] { fabric.Log("x", 1, 0); }},
  };
  for (const auto& [name, call] : verbs) {
    try {
      call();
      ADD_FAILURE() << name << " outside Launch did not throw";
    } catch (const FabricError& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << name;
      EXPECT_THAT(e.what(), HasSubstr("Fabric::" + name + " is for a rank's function")) << name;
    }
  }
}

}  // namespace
}  // namespace ddpspawn
