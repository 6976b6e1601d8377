// A C++ module's own parts through a real 2-rank fit. Log(): values that differ by rank are the
// mean over the ranks with sync_dist and rank 0's without, at each log point and as <name>_epoch,
// in fit's result, metrics.csv and every rank's callback metrics alike; ranks that log different
// names end fit with an error that lists each rank's. Its own torch::optim optimizer from
// ConfigureOptimizers, with parameter groups: a group at learning rate 0 stays where it started.
// The test binary launches itself as the ranks.
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/callbacks/callback.h"
#include "core/train/loop/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

constexpr char kModeEnv[] = "LOGGING_TEST_MODE";  // "agree", "differ" or "groups"
constexpr char kDirEnv[] = "LOGGING_TEST_DIR";

class LoggingRegressor : public NnModule {
 public:
  LoggingRegressor(int rank, bool differ)
      : LoggingRegressor(torch::nn::Linear(2, 1), rank, differ) {}
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, int64_t) override {
    Log("rank_mean", rank_, /*sync_dist=*/true);
    Log("rank_zero", rank_ + 1.0);  // without sync_dist: rank 0's, 1
    if (differ_ && rank_ == 1) Log("only_rank_1", 1.0);
    return torch::mse_loss(net_->forward(batch[0]), batch[1]);
  }
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch, int64_t) override {
    return StepMetrics{{"val_loss", torch::mse_loss(net_->forward(batch[0]), batch[1])}};
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch& batch, int64_t) override {
    return net_->forward(batch[0]);
  }
  // SGD with two parameter groups: the weight at 0.5, the bias frozen at 0.
  OptimizerConfig ConfigureOptimizers() override {
    OptimizerConfig config;
    config.custom = [this](const std::vector<at::Tensor>&) {
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(std::vector<at::Tensor>{net_->weight},
                          std::make_unique<torch::optim::SGDOptions>(0.5));
      groups.emplace_back(std::vector<at::Tensor>{net_->bias},
                          std::make_unique<torch::optim::SGDOptions>(0.0));
      return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.5));
    };
    config.custom_name = "SGD";
    return config;
  }
  const torch::nn::Linear& net() const { return net_; }

 private:
  LoggingRegressor(const torch::nn::Linear& net, int rank, bool differ)
      : NnModule(net.ptr()), net_(net), rank_(rank), differ_(differ) {}
  torch::nn::Linear net_;
  int rank_;
  bool differ_;
};

// What each rank's callbacks saw at the end of the last epoch.
class RecordMetrics : public Callback {
 public:
  std::string name() const override { return "RecordMetrics"; }
  absl::Status OnTrainEpochEnd(CallbackContext& context) override {
    seen.clear();
    for (const auto& [name, value] : context.metrics()) {
      if (name != "train_loss" && name != "train_loss_epoch") {
        absl::StrAppend(&seen, name, "=", value, " ");
      }
    }
    return absl::OkStatus();
  }
  std::string seen;
};

absl::StatusOr<std::string> Train(DDPSpawnStrategy& strategy) {
  const std::string mode = std::getenv(kModeEnv);
  const bool differ = mode == "differ";
  auto module = std::make_shared<LoggingRegressor>(strategy.global_rank(), differ);
  const at::Tensor weight = module->net()->weight.detach().clone();
  const at::Tensor bias = module->net()->bias.detach().clone();
  auto recorder = std::make_shared<RecordMetrics>();
  TrainerOptions options;
  options.max_epochs = 2;
  options.batch_size = 8;
  options.log_every_n_steps = 2;
  options.enable_progress = false;
  options.default_root_dir = std::getenv(kDirEnv);
  options.callbacks = {recorder};
  torch::manual_seed(0);
  Dataset train;
  train.features = torch::randn({64, 2});
  train.labels = torch::randn({64, 1});
  train.source = "random";
  Trainer trainer(strategy, options);
  absl::StatusOr<FitResult> fit = trainer.Fit(module, train, nullptr);
  if (!fit.ok()) return fit.status();
  if (mode == "groups") {  // rank 0's: its start is every rank's (DDP broadcasts it)
    return absl::StrCat("weight_moved=", !torch::equal(weight, module->net()->weight),
                        " bias_moved=", !torch::equal(bias, module->net()->bias));
  }
  absl::StatusOr<std::vector<std::string>> seen = strategy.group()->AllGatherBytes(recorder->seen);
  if (!seen.ok()) return seen.status();
  std::string result;
  for (const auto& [name, value] : fit->metrics) absl::StrAppend(&result, name, "=", value, " ");
  return absl::StrCat(result, "| callbacks: ", absl::StrJoin(*seen, " / "));
}

absl::StatusOr<std::string> Launch(const std::string& mode, const std::string& dir) {
  StrategyOptions options;
  options.parallel_devices = {c10::kCPU, c10::kCPU};
  options.worker_env = {absl::StrCat(kModeEnv, "=", mode), absl::StrCat(kDirEnv, "=", dir)};
  DDPSpawnStrategy strategy(options);
  return strategy.Launch(Train);
}

std::string TestDir(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(ModuleLogTest, SyncDistAveragesAndOtherwiseRankZerosValue) {
  absl::StatusOr<std::string> result = Launch("agree", TestDir("agree"));
  ASSERT_TRUE(result.ok()) << result.status();
  // Ranks 0 and 1: the mean of 0 and 1, and rank 0's 1 (rank 1 logs 2).
  EXPECT_THAT(*result,
              HasSubstr("rank_mean=0.5 rank_mean_epoch=0.5 rank_zero=1 rank_zero_epoch=1 "));
  const std::string callbacks = "rank_mean=0.5 rank_mean_epoch=0.5 rank_zero=1 rank_zero_epoch=1 ";
  EXPECT_THAT(*result, HasSubstr(absl::StrCat("| callbacks: ", callbacks, " / ", callbacks)));
  std::ifstream csv(TestDir("agree") + "/metrics.csv");
  std::stringstream text;
  text << csv.rdbuf();
  // 4 steps an epoch (32 samples a rank, batch 8), a log point every 2 steps.
  EXPECT_THAT(text.str(), HasSubstr("0,2,rank_mean,0.5\n"));
  EXPECT_THAT(text.str(), HasSubstr("1,8,rank_zero_epoch,1\n"));
}

TEST(ModuleOptimizerTest, ParameterGroupsKeepTheirOwnRates) {
  absl::StatusOr<std::string> result = Launch("groups", TestDir("groups"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, "weight_moved=1 bias_moved=0");
}

TEST(ModuleLogTest, RanksThatLogDifferentNamesAreRefused) {
  absl::StatusOr<std::string> result = Launch("differ", TestDir("differ"));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("logged different metrics since the last log point (rank 0: rank_mean "
                        "(sync_dist), rank_zero; rank 1: only_rank_1, rank_mean (sync_dist), "
                        "rank_zero)"));
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  ddpspawn::DDPSpawnStrategy worker_strategy([] {
    ddpspawn::StrategyOptions options;
    options.parallel_devices = {c10::kCPU, c10::kCPU};
    return options;
  }());
  if (ddpspawn::IsWorkerProcess()) return worker_strategy.RunWorker(ddpspawn::Train);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
