// SyncBatchNorm in one process: without a group it computes what BatchNorm does (training and eval,
// running statistics included), and ConvertSyncBatchNorm replaces the BatchNorm layers of nested
// Sequential containers, keeping their weights and statistics, and refuses one that a custom module
// holds, naming it.
#include "core/ddp/sync_batch_norm.h"

#include <torch/torch.h>

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

// A module that holds a BatchNorm itself, and one that holds a Sequential.
struct HoldsBatchNormImpl : torch::nn::Module {
  HoldsBatchNormImpl() : bn(register_module("bn", torch::nn::BatchNorm1d(3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return bn->forward(x); }
  torch::nn::BatchNorm1d bn;
};
TORCH_MODULE(HoldsBatchNorm);

struct HoldsSequentialImpl : torch::nn::Module {
  HoldsSequentialImpl()
      : body(register_module(
            "body", torch::nn::Sequential(torch::nn::Linear(3, 3), torch::nn::BatchNorm1d(3)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return body->forward(x); }
  torch::nn::Sequential body;
};
TORCH_MODULE(HoldsSequential);

TEST(SyncBatchNormTest, WithoutAGroupItIsBatchNorm) {
  torch::manual_seed(0);
  torch::nn::BatchNorm2d plain(torch::nn::BatchNorm2dOptions(4).momentum(0.3));
  {
    torch::NoGradGuard no_grad;
    plain->weight.copy_(torch::rand({4}) + 0.5);
    plain->bias.copy_(torch::rand({4}) - 0.5);
  }
  torch::nn::Sequential converted(torch::nn::BatchNorm2d(
      std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(plain->clone())));
  ASSERT_EQ(*ConvertSyncBatchNorm(converted.ptr()), 1);
  ASSERT_NE(converted->ptr(0)->as<SyncBatchNormImpl>(), nullptr);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x = (torch::randn({5, 4, 3, 3}) * 2 + 1).requires_grad_();
    const torch::Tensor x2 = x.detach().clone().requires_grad_();
    const torch::Tensor expected = plain->forward(x);
    const torch::Tensor got = converted->forward(x2);
    EXPECT_LT((got - expected).abs().max().item<double>(), 1e-6);  // 2.4e-7 seen
    (expected * expected.detach()).sum().backward();
    (got * got.detach()).sum().backward();
    std::printf("step %d: output %.3g, input gradient %.3g apart\n", step,
                (got - expected).abs().max().item<double>(),
                (x.grad() - x2.grad()).abs().max().item<double>());
    EXPECT_LT((x.grad() - x2.grad()).abs().max().item<double>(), 1e-6);  // 2.0e-7 seen
  }
  auto* sync = converted->ptr(0)->as<SyncBatchNormImpl>();
  std::printf("weight gradient %.3g, running mean %.3g, running variance %.3g apart\n",
              (sync->weight.grad() - plain->weight.grad()).abs().max().item<double>(),
              (sync->running_mean - plain->running_mean).abs().max().item<double>(),
              (sync->running_var - plain->running_var).abs().max().item<double>());
  // Sums over 3 steps of 45 products (float32 against float64): 7.6e-6 seen.
  EXPECT_LT((sync->weight.grad() - plain->weight.grad()).abs().max().item<double>(), 3e-5);
  EXPECT_LT((sync->running_mean - plain->running_mean).abs().max().item<double>(), 1e-6);
  EXPECT_LT((sync->running_var - plain->running_var).abs().max().item<double>(), 1e-6);  // 2.4e-7
  EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 3);
  plain->eval();
  converted->eval();
  const torch::Tensor x = torch::randn({2, 4, 3, 3});
  EXPECT_LT((converted->forward(x) - plain->forward(x)).abs().max().item<double>(), 1e-6);
}

TEST(SyncBatchNormTest, ConvertsNestedSequentialsAndRefusesOtherHolders) {
  HoldsSequential inner;
  torch::nn::Sequential net(torch::nn::Linear(3, 3), torch::nn::BatchNorm1d(3), inner);
  ASSERT_EQ(*ConvertSyncBatchNorm(net.ptr()), 2);
  EXPECT_NE(inner->body->ptr(1)->as<SyncBatchNormImpl>(), nullptr);
  EXPECT_EQ(net->forward(torch::randn({4, 3})).sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(net->named_parameters().size(), 8u);  // two Linear, two SyncBatchNorm
  torch::nn::Sequential holder(HoldsBatchNorm{});
  absl::StatusOr<int> refused = ConvertSyncBatchNorm(holder.ptr());
  EXPECT_THAT(std::string(refused.status().message()),
              testing::HasSubstr("BatchNorm '0.bn' belongs to a"));
}

}  // namespace
}  // namespace ddpspawn
