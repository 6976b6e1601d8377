// The callbacks' rules on one rank, through a CallbackContext that writes real files: checkpoint
// names from templates; early stopping's patience, min_delta, mode and non-finite check, and its
// state across a checkpoint; top-k keeping exactly the k best files on disk, and its state.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/train/callbacks/early_stopping.h"
#include "core/train/callbacks/lr_scheduler.h"
#include "core/train/callbacks/model_checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// One rank's fit, 10 optimizer steps an epoch, 100 in all, at base rate 0.1: metrics set by the
// test; checkpoints are real files.
class OneRankContext : public CallbackContext {
 public:
  explicit OneRankContext(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
  }

  int global_rank() const override { return 0; }
  int world_size() const override { return 1; }
  int64_t epoch() const override { return epoch_; }
  int64_t global_step() const override { return (epoch_ + 1) * 10; }
  const std::map<std::string, double>& metrics() const override { return metrics_; }
  const std::map<std::string, double>& epoch_metrics() const override { return metrics_; }
  bool validates() const override { return true; }
  bool validated_this_epoch() const override { return true; }
  double learning_rate() const override { return lr_; }
  std::string optimizer_name() const override { return "SGD"; }
  double base_learning_rate() const override { return 0.1; }
  int64_t total_steps() const override { return 100; }
  int64_t total_epochs() const override { return 10; }
  void set_learning_rate(double lr) override { lr_ = lr; }
  std::string checkpoint_dir() const override { return dir_; }
  absl::Status Log(const std::string& name, double value) override {
    metrics_[name] = value;
    return absl::OkStatus();
  }
  absl::Status SaveCheckpoint(const std::string& path) override {
    std::ofstream(path) << epoch_;
    return absl::OkStatus();
  }
  absl::Status RemoveCheckpoint(const std::string& path) override {
    std::filesystem::remove(path);
    return absl::OkStatus();
  }
  absl::StatusOr<bool> AnyRank(bool mine) override { return mine; }
  void RequestStop(const std::string& by, const std::string& why) override {
    stopped_by = by;
    why_stopped = why;
  }

  // The next epoch, whose validation logged `value` as `name`.
  void EndEpochWith(const std::string& name, double value) {
    ++epoch_;
    metrics_ = {{name, value}};
  }
  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  std::string stopped_by, why_stopped;

 private:
  std::string dir_;
  int64_t epoch_ = -1;
  std::map<std::string, double> metrics_;
  double lr_ = 0.1;
};

TEST(CallbacksTest, CheckpointNamesFollowTheTemplate) {
  const std::map<std::string, double> metrics = {{"val_loss", 0.123456}, {"lr", 0.00025}};
  EXPECT_EQ(*FormatCheckpointName("{epoch}-{step}", 2, 40, metrics), "epoch=2-step=40");
  EXPECT_EQ(*FormatCheckpointName("best_{val_loss:.3f}", 2, 40, metrics), "best_val_loss=0.123");
  EXPECT_EQ(*FormatCheckpointName("{lr:.1e}+{val_loss}", 0, 0, metrics),
            "lr=2.5e-04+val_loss=0.123456");
  EXPECT_THAT(FormatCheckpointName("{epoch}-{val_f1}", 0, 0, metrics).status().message(),
              HasSubstr("names 'val_f1', which fit does not log (it logs lr, val_loss)"));
  for (const char* bad : {"{epoch", "{}", "a/{epoch}", "{val_loss:4f}", "{val_loss:.4d}", ""}) {
    EXPECT_FALSE(FormatCheckpointName(bad, 0, 0, metrics).ok()) << bad;
  }
  EXPECT_FALSE(FormatCheckpointName("last", 0, 0, metrics).ok());
}

TEST(CallbacksTest, EarlyStoppingCountsChecksWithoutAnImprovementAboveMinDelta) {
  OneRankContext context(absl::StrCat(testing::TempDir(), "/early"));
  EarlyStopping stopping({"val_accuracy", MonitorMode::kAuto, 2, 0.1, true});
  // max (auto for an accuracy): 0.55 and 0.75 are within 0.1 of the best.
  const std::vector<double> scores = {0.5, 0.55, 0.7, 0.75};
  for (double score : scores) {
    context.EndEpochWith("val_accuracy", score);
    ASSERT_TRUE(stopping.OnTrainEpochEnd(context).ok());
    EXPECT_EQ(context.stopped_by, "") << score;
  }
  EXPECT_EQ(stopping.wait_count(), 1);
  EXPECT_EQ(stopping.best_score(), 0.7);
  // Its state, as a checkpoint keeps it, carries the count into a new one.
  EarlyStopping resumed({"val_accuracy", MonitorMode::kAuto, 2, 0.1, true});
  ASSERT_TRUE(resumed.OnLoadCheckpoint(stopping.OnSaveCheckpoint()).ok());
  context.EndEpochWith("val_accuracy", 0.79);
  ASSERT_TRUE(resumed.OnTrainEpochEnd(context).ok());
  EXPECT_EQ(context.stopped_by, "early_stopping");
  EXPECT_THAT(context.why_stopped,
              HasSubstr("val_accuracy did not improve by more than 0.1 in 2 checks (best 0.7 at "
                        "epoch 3)"));
  EXPECT_FALSE(resumed.OnLoadCheckpoint("best=x").ok());
}

TEST(CallbacksTest, EarlyStoppingStopsAtOnceOnANonFiniteMetric) {
  OneRankContext context(absl::StrCat(testing::TempDir(), "/finite"));
  EarlyStopping stopping({"val_loss", MonitorMode::kAuto, 5, 0.0, true});
  context.EndEpochWith("val_loss", 1.0);
  ASSERT_TRUE(stopping.OnTrainEpochEnd(context).ok());
  context.EndEpochWith("val_loss", std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(stopping.OnTrainEpochEnd(context).ok());
  EXPECT_EQ(context.stopped_by, "early_stopping");
  EXPECT_THAT(context.why_stopped, HasSubstr("val_loss became nan"));
}

TEST(CallbacksTest, TopKKeepsExactlyTheBestFilesAndResumesWithThem) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/topk");
  OneRankContext context(dir);
  ModelCheckpointOptions options;
  options.monitor = "val_loss";
  options.save_top_k = 2;
  options.filename = "{epoch}-{val_loss:.2f}";
  ModelCheckpoint checkpoint(options);
  for (double loss : {3.0, 1.0, 2.0, 0.5, 0.7}) {
    context.EndEpochWith("val_loss", loss);
    ASSERT_TRUE(checkpoint.OnTrainEpochEnd(context).ok());
  }
  EXPECT_EQ(context.Files(),
            (std::set<std::string>{"epoch=3-val_loss=0.50.ckpt", "epoch=4-val_loss=0.70.ckpt"}));
  EXPECT_EQ(checkpoint.best_model_path(), dir + "/epoch=3-val_loss=0.50.ckpt");
  EXPECT_EQ(checkpoint.best_model_score(), 0.5);
  // Resumed from its state, it displaces the worse of the two it kept.
  ModelCheckpoint resumed(options);
  ASSERT_TRUE(resumed.OnLoadCheckpoint(checkpoint.OnSaveCheckpoint()).ok());
  context.EndEpochWith("val_loss", 0.6);
  ASSERT_TRUE(resumed.OnTrainEpochEnd(context).ok());
  EXPECT_EQ(context.Files(),
            (std::set<std::string>{"epoch=3-val_loss=0.50.ckpt", "epoch=5-val_loss=0.60.ckpt"}));
  // An equal score does not displace; a nan never enters.
  for (double loss : {0.6, std::nan("")}) {
    context.EndEpochWith("val_loss", loss);
    ASSERT_TRUE(resumed.OnTrainEpochEnd(context).ok());
  }
  EXPECT_EQ(context.Files().size(), 2u);
}

TEST(CallbacksTest, WithoutAMonitorTopKKeepsTheLatestOrEvery) {
  OneRankContext context(absl::StrCat(testing::TempDir(), "/latest"));
  ModelCheckpointOptions options;
  options.filename = "{epoch}";
  ModelCheckpoint latest(options);
  ASSERT_TRUE(ModelCheckpointEnabled(options));
  for (int i = 0; i < 3; ++i) {
    context.EndEpochWith("val_loss", 1.0);
    ASSERT_TRUE(latest.OnTrainEpochEnd(context).ok());
  }
  EXPECT_EQ(context.Files(), (std::set<std::string>{"epoch=2.ckpt"}));
  EXPECT_FALSE(ModelCheckpointEnabled(ModelCheckpointOptions()));  // last.ckpt is the latest
  options.filename.clear();
  options.save_top_k = 3;
  EXPECT_THAT(CheckModelCheckpointOptions(options).message(), HasSubstr("needs --monitor"));
}

TEST(CallbacksTest, CosineAndOneCycleFollowTheirCurves) {
  LrSchedulerOptions cosine;
  cosine.schedule = LrSchedule::kCosine;
  cosine.warmup_steps = 4;
  cosine.min_lr = 0.01;
  // Warm-up: 1/4, 2/4, ... of the rate; then half a cosine over the other 96 steps, through the
  // midpoint at step 4 + 48.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cosine, 0.1, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cosine, 0.1, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cosine, 0.1, 4, 100), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cosine, 0.1, 52, 100), 0.055);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cosine, 0.1, 100, 100), 0.01);
  LrSchedulerOptions onecycle;
  onecycle.schedule = LrSchedule::kOneCycle;
  // From 0.1 / 25 up to 0.1 at 30% of the steps, then down to 0.1 / 25 / 1e4.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(onecycle, 0.1, 0, 100), 0.004);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(onecycle, 0.1, 15, 100), 0.052);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(onecycle, 0.1, 30, 100), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(onecycle, 0.1, 100, 100), 4e-7);
  onecycle.warmup_steps = 3;
  EXPECT_THAT(CheckLrSchedulerOptions(onecycle).message(), HasSubstr("warms up by itself"));
}

TEST(CallbacksTest, AnEpochIntervalSetsTheRateAtEachEpochsStart) {
  OneRankContext context(absl::StrCat(testing::TempDir(), "/by_epoch"));
  LrSchedulerOptions options;
  options.schedule = LrSchedule::kCosine;
  options.interval = LrInterval::kEpoch;
  LrScheduler scheduler(options);
  // Over 10 epochs from 0.1 to 0; the steps within an epoch change nothing.
  for (int epoch = 0; epoch < 10; ++epoch) {
    context.EndEpochWith("val_loss", 1.0);
    ASSERT_TRUE(scheduler.OnTrainEpochStart(context).ok());
    ASSERT_TRUE(scheduler.OnTrainBatchStart(context, 0).ok());
    EXPECT_DOUBLE_EQ(context.learning_rate(), 0.05 * (1 + std::cos(M_PI * epoch / 10))) << epoch;
  }
}

TEST(CallbacksTest, PlateauScalesTheRateAndKeepsItsStateAcrossACheckpoint) {
  OneRankContext context(absl::StrCat(testing::TempDir(), "/plateau"));
  LrSchedulerOptions options;
  options.schedule = LrSchedule::kPlateau;
  options.plateau_patience = 1;
  options.plateau_factor = 0.5;
  LrScheduler scheduler(options);
  // val_loss (auto: min): 1.0 sets the best; 0.99995 is within 1e-4 of it.
  for (double loss : {1.0, 0.99995, 1.0}) {
    context.EndEpochWith("val_loss", loss);
    ASSERT_TRUE(scheduler.OnTrainEpochEnd(context).ok());
  }
  EXPECT_DOUBLE_EQ(context.learning_rate(), 0.05);
  LrScheduler resumed(options);
  ASSERT_TRUE(resumed.OnLoadCheckpoint(scheduler.OnSaveCheckpoint()).ok());
  ASSERT_TRUE(resumed.OnTrainEpochStart(context).ok());
  EXPECT_DOUBLE_EQ(context.learning_rate(), 0.05);
  for (double loss : {0.5, 0.6, 0.7}) {
    context.EndEpochWith("val_loss", loss);
    ASSERT_TRUE(resumed.OnTrainEpochEnd(context).ok());
  }
  EXPECT_DOUBLE_EQ(context.learning_rate(), 0.025);
}

}  // namespace
}  // namespace ddpspawn
