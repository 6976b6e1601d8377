// Fit's callbacks end to end through the CLI, on 2 real ranks: early stopping ends a stalled run
// after `patience` checks and resumes with its count; the top-k checkpoints are exactly the k best
// by the monitored metric, hold the weights that scored it, and never replace another run's files;
// the learning-rate monitor logs the scheduled rate, and the cosine and plateau schedules set it;
// bad callback options are refused with the reason.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/util/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/train/cli_testing.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// metrics.csv's values of `name`, by epoch or by step (the last row of each).
enum class By { kEpoch = 0, kStep = 1 };  // the column
std::map<int64_t, double> Metric(const std::string& root, const std::string& name, By by) {
  std::map<int64_t, double> values;
  const std::string csv = ReadWholeFile(root + "/metrics.csv").value_or("");
  for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields = absl::StrSplit(line, ',');
    int64_t key = 0;
    double value = 0;
    if (fields.size() == 4 && fields[2] == name &&
        absl::SimpleAtoi(fields[static_cast<int>(by)], &key) &&
        absl::SimpleAtod(fields[3], &value)) {
      values[key] = value;
    }
  }
  return values;
}

std::map<int64_t, double> MetricByEpoch(const std::string& root, const std::string& name) {
  return Metric(root, name, By::kEpoch);
}

std::set<std::string> CheckpointFiles(const std::string& root) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/checkpoints")) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

std::string FitArgs(const std::string& name) {
  return absl::StrCat("fit --model ", kModel, " --train ", WriteClassification(name + ".csv", 240),
                      " --val ", WriteClassification(name + "_val.csv", 61),
                      " --nproc-per-node 2 --batch-size 16 --seed 3 --default-root-dir ",
                      Dir(name));
}

TEST(CallbacksCliTest, EarlyStoppingEndsAStalledRunAndResumesWithItsCount) {
  const std::string args =
      absl::StrCat(FitArgs("early"), " --lr 1e-9 --max-epochs 10 --early-stopping-monitor val_loss",
                   " --early-stopping-patience 2 --early-stopping-min-delta 0.01");
  CliRun run = Cli(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The first check sets the best; the next two do not beat it by 0.01.
  EXPECT_EQ(run.Number("epoch"), 3) << run.output;
  EXPECT_EQ(run.values["stopped_by"], "early_stopping");
  EXPECT_THAT(run.output,
              HasSubstr("fit stopped after epoch 3: early stopping: val_loss did not improve by "
                        "more than 0.01 in 2 checks (best "));
  EXPECT_EQ(MetricByEpoch(Dir("early"), "val_loss").size(), 3u);
  // Resumed, the count goes on from 2: one more stalled check stops it. A fresh count would run
  // three more epochs.
  CliRun resumed = Cli(absl::StrCat(args, " --resume-from ", run.values["checkpoint"]));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(resumed.Number("epoch"), 4) << resumed.output;
  EXPECT_EQ(resumed.values["stopped_by"], "early_stopping");
}

// The k best under ModelCheckpoint's rule: a later score enters when the k are not yet there, or
// when it beats the worst of them strictly.
std::set<int64_t> TopK(const std::map<int64_t, double>& scores, size_t k) {
  std::vector<std::pair<double, int64_t>> kept;
  for (const auto& [epoch, score] : scores) {
    if (kept.size() < k) {
      kept.emplace_back(score, epoch);
      continue;
    }
    auto worst = std::min_element(kept.begin(), kept.end());
    if (score > worst->first) *worst = {score, epoch};
  }
  std::set<int64_t> epochs;
  for (const auto& [score, epoch] : kept) epochs.insert(epoch);
  return epochs;
}

TEST(CallbacksCliTest, SaveTopKKeepsExactlyTheBestCheckpointsBesideLast) {
  const std::string args = absl::StrCat(FitArgs("topk"),
                                        " --lr 0.3 --max-epochs 6 --save-top-k 2 --monitor "
                                        "val_accuracy");
  CliRun run = Cli(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::map<int64_t, double> accuracy = MetricByEpoch(Dir("topk"), "val_accuracy");
  ASSERT_EQ(accuracy.size(), 6u);
  const std::set<int64_t> best = TopK(accuracy, 2);
  std::set<std::string> expected = {"last.ckpt"};
  for (int64_t epoch : best) {
    // Epoch 0's step: 120 samples per rank in batches of 16.
    expected.insert(absl::StrFormat("epoch=%d-step=%d-val_accuracy=%.4f.ckpt", epoch,
                                    (epoch + 1) * 8, accuracy.at(epoch)));
  }
  EXPECT_EQ(CheckpointFiles(Dir("topk")), expected) << run.output;
  // The best file holds the weights that scored it (the same batches, so the same sums).
  const std::string best_path = run.values["best_model_path"];
  ASSERT_TRUE(absl::StrContains(best_path, "val_accuracy=")) << run.output;
  CliRun validated = Cli(absl::StrCat("validate --model ", kModel, " --data ", Dir("topk_val.csv"),
                                      " --nproc-per-node 2 --batch-size 16 --checkpoint ",
                                      best_path, " --default-root-dir ", Dir("topk_validate")));
  ASSERT_EQ(validated.exit_code, 0) << validated.output;
  EXPECT_NEAR(validated.Number("metric.val_accuracy"), run.Number("best_model_score"), 1e-12);
  double best_score = 0;
  for (const auto& [epoch, score] : accuracy) best_score = std::max(best_score, score);
  EXPECT_NEAR(run.Number("best_model_score"), best_score, 1e-8);  // metrics.csv has 9 digits

  // A second run into the same directory names its files -v1 and removes none of the first run's.
  CliRun again = Cli(args);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const std::set<std::string> after = CheckpointFiles(Dir("topk"));
  for (const std::string& name : expected) EXPECT_EQ(after.count(name), 1u) << name;
  EXPECT_EQ(after.size(), expected.size() + 2) << again.output;
  EXPECT_THAT(again.values["best_model_path"], HasSubstr("-v1.ckpt"));
}

TEST(CallbacksCliTest, TheLearningRateMonitorLogsTheScheduledRate) {
  CliRun by_epoch = Cli(absl::StrCat(FitArgs("lr_epoch"),
                                     " --lr 0.1 --step-lr-every 1 --step-lr-gamma 0.5 "
                                     "--max-epochs 3 --lr-monitor epoch"));
  ASSERT_EQ(by_epoch.exit_code, 0) << by_epoch.output;
  const std::map<int64_t, double> rates = MetricByEpoch(Dir("lr_epoch"), "lr-SGD");
  EXPECT_EQ(rates, (std::map<int64_t, double>{{0, 0.1}, {1, 0.05}, {2, 0.025}}));
  CliRun by_step = Cli(absl::StrCat(FitArgs("lr_step"),
                                    " --optimizer adam --lr 0.01 --max-epochs 1 --lr-monitor step "
                                    "--log-every-n-steps 2"));
  ASSERT_EQ(by_step.exit_code, 0) << by_step.output;
  const std::string csv = ReadWholeFile(Dir("lr_step") + "/metrics.csv").value_or("");
  for (int step : {2, 4, 6, 8}) {
    EXPECT_THAT(csv, HasSubstr(absl::StrCat("0,", step, ",lr-Adam,0.01\n")));
  }
  EXPECT_THAT(csv, ::testing::Not(HasSubstr("0,1,lr-Adam")));
}

TEST(CallbacksCliTest, LearningRateSchedulesSetTheRateOfEveryStep) {
  // 2 epochs of 8 steps: 4 of warm-up, then a cosine from 0.1 to 0.001.
  CliRun cosine = Cli(absl::StrCat(FitArgs("cosine"),
                                   " --lr 0.1 --max-epochs 2 --lr-scheduler cosine "
                                   "--lr-warmup-steps 4 --lr-min 0.001 --lr-monitor step "
                                   "--log-every-n-steps 1"));
  ASSERT_EQ(cosine.exit_code, 0) << cosine.output;
  const std::map<int64_t, double> rates = Metric(Dir("cosine"), "lr-SGD", By::kStep);
  ASSERT_EQ(rates.size(), 16u);
  for (int64_t step = 1; step <= 16; ++step) {
    // The rate step `step` used: after step - 1 steps.
    const double expected =
        step <= 4 ? 0.1 * static_cast<double>(step) / 4
                  : 0.001 + 0.099 * (1 + std::cos(M_PI * static_cast<double>(step - 5) / 12)) / 2;
    // metrics.csv holds 9 significant digits: half a unit of the 9th is at most 5e-9 of the value
    // (2e-9 seen).
    EXPECT_NEAR(rates.at(step), expected, 5e-9 * expected) << step;
  }
  // The same curve by epoch, over 4 epochs, from the epochs' starts.
  CliRun by_epoch = Cli(absl::StrCat(FitArgs("cosine_epoch"),
                                     " --lr 0.1 --max-epochs 4 --lr-scheduler cosine "
                                     "--lr-scheduler-interval epoch --lr-monitor epoch"));
  ASSERT_EQ(by_epoch.exit_code, 0) << by_epoch.output;
  const std::map<int64_t, double> per_epoch = MetricByEpoch(Dir("cosine_epoch"), "lr-SGD");
  ASSERT_EQ(per_epoch.size(), 4u);
  for (const auto& [epoch, rate] : per_epoch) {
    const double expected = 0.05 * (1 + std::cos(M_PI * static_cast<double>(epoch) / 4));
    EXPECT_NEAR(rate, expected, 5e-9 * expected) << epoch;
  }
  // Reduce on plateau: a rate too small to move val_loss halves after more than one epoch without a
  // better one.
  CliRun plateau = Cli(absl::StrCat(FitArgs("plateau"),
                                    " --lr 1e-6 --max-epochs 6 --lr-scheduler plateau "
                                    "--lr-plateau-patience 1 --lr-plateau-factor 0.5 "
                                    "--lr-monitor epoch"));
  ASSERT_EQ(plateau.exit_code, 0) << plateau.output;
  EXPECT_EQ(MetricByEpoch(Dir("plateau"), "lr-SGD"),
            (std::map<int64_t, double>{
                {0, 1e-6}, {1, 1e-6}, {2, 1e-6}, {3, 5e-7}, {4, 5e-7}, {5, 2.5e-7}}));
}

TEST(CallbacksCliTest, BadCallbackOptionsAreRefusedWithTheReason) {
  const std::string base = FitArgs("bad_callbacks") + " --max-epochs 2";
  const std::pair<std::string, std::string> cases[] = {
      {"--monitor val_f1",
       "monitor='val_f1': cannot tell whether it improves up or down: set mode"},
      {"--early-stopping-monitor val_f1",
       "early_stopping_monitor='val_f1': cannot tell whether it improves up or down: set "
       "early_stopping_mode"},
      {"--save-top-k 3", "save_top_k 3 needs --monitor"},
      {"--monitor val_loss --checkpoint-filename ../x", "'/' is not allowed"},
      {"--monitor val_loss --checkpoint-filename last", "it names last.ckpt"},
      {"--monitor val_loss --checkpoint-filename {val_loss:4}", "is not a format such as .4f"},
      {"--monitor val_loss --every-n-epochs 0", "ModelCheckpoint would never check"},
      {"--early-stopping-monitor val_los --early-stopping-mode min",
       "EarlyStopping monitors 'val_los', which fit does not log (it logs train_loss_epoch, "
       "val_accuracy, val_loss)"},
      {"--monitor val_loss --checkpoint-filename {epoch}-{val_acc:.2f}",
       "names 'val_acc', which fit does not log"},
      {"--lr-scheduler cosine --step-lr-every 2", "two schedules for one rate"},
      {"--lr-scheduler onecycle --lr-warmup-steps 5", "warms up by itself"},
      {"--lr-scheduler plateau --lr-plateau-monitor val_los --lr-plateau-mode min",
       "lr_plateau_monitor 'val_los', which fit does not log"},
  };
  for (const auto& [options, message] : cases) {
    CliRun run = Cli(absl::StrCat(base, " ", options));
    EXPECT_NE(run.exit_code, 0) << options;
    EXPECT_THAT(run.output, HasSubstr(message)) << options;
  }
}

}  // namespace
}  // namespace ddpspawn
