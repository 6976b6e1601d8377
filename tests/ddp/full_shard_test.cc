// FullShard's refusals and its gather and free, in process (world size 1): the units it accepts,
// parameters that hold no bytes between forwards, and GatherAll()/ReshardAll()'s nesting and
// writeback. Training across ranks is zero_redundancy_optimizer_test's (full_shard cases).
#include "core/ddp/full_shard.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "core/comm/process_group.h"
#include "core/ddp/size_based_units.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using testing::HasSubstr;

std::unique_ptr<ProcessGroup> SoloGroup() {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Create(ClusterInfo{});
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

torch::nn::Sequential MakeNet() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
}

std::vector<std::shared_ptr<torch::nn::Module>> Linears(torch::nn::Sequential& net) {
  return {net[0], net[2]};
}

TEST(FullShardTest, RefusesAParameterInNoUnit) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  torch::nn::Sequential net = MakeNet();
  absl::StatusOr<std::unique_ptr<FullShard>> shard =
      FullShard::Wrap(net.ptr(), {net[0]}, group.get());
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr("trainable parameter '2.weight' is in no unit"));
}

TEST(FullShardTest, RefusesAUnitListedTwice) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  torch::nn::Sequential net = MakeNet();
  absl::StatusOr<std::unique_ptr<FullShard>> shard =
      FullShard::Wrap(net.ptr(), {net[0], net[2], net[0]}, group.get());
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr("a module listed twice?"));
}

// A parameter over part of another tensor's storage: freeing the storage would free the rest.
struct SliceNet : torch::nn::Module {
  SliceNet() : whole(torch::zeros({4, 3})) {
    part = register_parameter("part", whole.narrow(0, 0, 2));
  }
  torch::Tensor whole, part;
};

TEST(FullShardTest, RefusesStorageItDoesNotOwn) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  auto net = std::make_shared<SliceNet>();
  absl::StatusOr<std::unique_ptr<FullShard>> shard = FullShard::Wrap(net, {net}, group.get());
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr("'part' does not own its storage alone"));
}

TEST(FullShardTest, ParametersHoldNoBytesBetweenForwards) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  torch::nn::Sequential net = MakeNet();
  torch::nn::Sequential plain = MakeNet();  // the same weights, never sharded
  absl::StatusOr<std::unique_ptr<FullShard>> shard =
      FullShard::Wrap(net.ptr(), Linears(net), group.get());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->WholeParameterBytes(), 0);
  for (const torch::Tensor& p : net->parameters()) EXPECT_EQ(p.storage().nbytes(), 0u);

  const torch::Tensor x = torch::randn({5, 4});
  (*shard)->ResetPeakWholeParameterBytes();
  absl::StatusOr<torch::Tensor> out = (*shard)->ForwardSequential(*net, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::equal(*out, plain->forward(x)));
  out->sum().backward();
  EXPECT_EQ((*shard)->WholeParameterBytes(), 0);
  // One unit at a time: the larger, Linear(4, 8), is 40 floats.
  EXPECT_EQ((*shard)->peak_whole_parameter_bytes(), 40 * 4);
  // Each parameter's gradient went to its rows (here all of them), and none is kept whole.
  for (const torch::Tensor& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(FullShardTest, RefusesUnevenInputs) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  torch::nn::Sequential net = MakeNet();
  absl::StatusOr<std::unique_ptr<FullShard>> shard =
      FullShard::Wrap(net.ptr(), Linears(net), group.get());
  ASSERT_TRUE(shard.ok()) << shard.status();
  absl::StatusOr<int> active = (*shard)->ddp().ActiveRanks(true);
  EXPECT_EQ(active.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(active.status().message(), HasSubstr("uneven inputs (ActiveRanks) under full_shard"));
}

TEST(FullShardTest, GatherAllNestsAndKeepsWhatWasWritten) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  torch::nn::Sequential net = MakeNet();
  absl::StatusOr<std::unique_ptr<FullShard>> shard =
      FullShard::Wrap(net.ptr(), Linears(net), group.get());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_THAT((*shard)->ReshardAll().message(), HasSubstr("ReshardAll() without a GatherAll()"));
  ASSERT_TRUE((*shard)->GatherAll().ok());
  ASSERT_TRUE((*shard)->GatherAll().ok());
  {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : net->parameters()) p.fill_(0.5);
  }
  ASSERT_TRUE((*shard)->ReshardAll().ok());  // the inner one: still whole
  EXPECT_EQ((*shard)->WholeParameterBytes(), (40 + 18) * 4);
  ASSERT_TRUE((*shard)->ReshardAll().ok());
  EXPECT_EQ((*shard)->WholeParameterBytes(), 0);
  // Gathered again from the rows written back: the 0.5s.
  torch::NoGradGuard no_grad;
  absl::StatusOr<torch::Tensor> out = (*shard)->ForwardSequential(*net, torch::ones({1, 4}));
  ASSERT_TRUE(out.ok()) << out.status();
  // Hidden: 4 * 0.5 + 0.5 = 2.5 each; output: 8 * 0.5 * 2.5 + 0.5 = 10.5.
  EXPECT_TRUE(torch::allclose(*out, torch::full({1, 2}, 10.5)));
}

}  // namespace
}  // namespace ddpspawn

namespace ddpspawn {
namespace {

using Modules = std::vector<std::shared_ptr<torch::nn::Module>>;

TEST(SizeBasedUnitsTest, ChoosesModulesByTheParametersTheyWouldHold) {
  torch::nn::Sequential net = MakeNet();  // Linear(4, 8): 40 elements, Linear(8, 2): 18
  EXPECT_EQ(SizeBasedUnits(net.ptr(), 1), (Modules{net[0], net[2]}));  // nothing left to the root
  EXPECT_EQ(SizeBasedUnits(net.ptr(), 20), (Modules{net[0], net.ptr()}));
  EXPECT_EQ(SizeBasedUnits(net.ptr(), 1000), (Modules{net.ptr()}));
  // Nested: the inner Sequential's Linear(8, 8) (72) is a unit, its Linear(4, 8) (40) is left to
  // the inner Sequential, which passes it up with too few; the root takes it and Linear(8, 2).
  auto outer = std::make_shared<torch::nn::Module>();
  torch::nn::ModuleList inner = outer->register_module(
      "inner", torch::nn::ModuleList(torch::nn::Linear(4, 8), torch::nn::Linear(8, 8)));
  outer->register_module("head", torch::nn::Linear(8, 2));
  EXPECT_EQ(SizeBasedUnits(outer, 50), (Modules{inner[1], outer}));
  // A frozen parameter counts for no unit: Linear(4, 8) is left its bias alone (8 elements), too
  // few, which goes to the root.
  net[0]->named_parameters()["weight"].set_requires_grad(false);
  EXPECT_EQ(SizeBasedUnits(net.ptr(), 10), (Modules{net[2], net.ptr()}));
  EXPECT_EQ(SizeBasedUnits(net.ptr(), 8), (Modules{net[0], net[2]}));
}

TEST(FullShardTest, RunsTheRootUnitAroundItsChildren) {
  std::unique_ptr<ProcessGroup> group = SoloGroup();
  torch::nn::Sequential net = MakeNet();
  torch::nn::Sequential reference = MakeNet();
  absl::StatusOr<std::unique_ptr<FullShard>> shard =
      FullShard::Wrap(net.ptr(), SizeBasedUnits(net.ptr(), 20), group.get());
  ASSERT_TRUE(shard.ok()) << shard.status();
  torch::Tensor x = torch::randn({5, 4});
  absl::StatusOr<at::Tensor> out = (*shard)->ForwardSequential(*net, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::equal(*out, reference->forward(x)));
  // Both units were whole at once (the root's Linear(8, 2) around the whole pass), and neither is
  // after the forward.
  EXPECT_EQ((*shard)->peak_whole_parameter_bytes(), 4 * (40 + 18));
  EXPECT_EQ((*shard)->WholeParameterBytes(), 0);
  out->sum().backward();
  EXPECT_EQ((*shard)->WholeParameterBytes(), 0);
}

}  // namespace
}  // namespace ddpspawn
