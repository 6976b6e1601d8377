// The ddpspawn CLI end to end, with real ranks: fit makes the loss fall and its checkpoint holds
// rank 0's final weights; resuming after k steps and training m more is bit for bit the same as k+m
// steps at once; predict returns dataset order; bad inputs (a corrupt checkpoint among them) are
// clear errors before anything runs; outputs are never written through a planted link; a diverging
// run stops with an error and keeps its last good checkpoint.
#include <ATen/ATen.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/model/checkpoint.h"
#include "core/train/models/mlp_module.h"
#include "core/util/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/venv.h"
#include "tests/train/cli_testing.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CliTest, FitLearnsAndItsCheckpointHoldsTheFinalWeights) {
  const std::string train = WriteClassification("train.csv", 240);
  const std::string val = WriteClassification("val.csv", 60);
  const std::string common = absl::StrCat("--model ", kModel, " --nproc-per-node 2 --lr 0.5 ",
                                          "--momentum 0.9 --batch-size 16 --seed 3");
  CliRun short_run = Cli(absl::StrCat("fit ", common, " --train ", train, " --val ", val,
                                      " --max-epochs 1 --default-root-dir ", Dir("short")));
  ASSERT_EQ(short_run.exit_code, 0) << short_run.output;
  CliRun long_run = Cli(absl::StrCat("fit ", common, " --train ", train, " --val ", val,
                                     " --max-epochs 15 --default-root-dir ", Dir("long")));
  ASSERT_EQ(long_run.exit_code, 0) << long_run.output;
  EXPECT_LT(long_run.Number("metric.val_loss"), short_run.Number("metric.val_loss"));
  EXPECT_GT(long_run.Number("metric.val_accuracy"), 0.8);
  EXPECT_EQ(long_run.Number("epoch"), 15);
  EXPECT_EQ(long_run.Number("global_step"),
            15 * 8);  // 120 samples per rank / 16
  // Validating the returned checkpoint gives the fit's final validation metrics: the checkpoint
  // holds rank 0's final weights.
  CliRun check =
      Cli(absl::StrCat("validate --model ", kModel, " --data ", val,
                       " --nproc-per-node 2 --checkpoint ", long_run.values["checkpoint"]));
  ASSERT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NEAR(check.Number("metric.val_loss"), long_run.Number("metric.val_loss"), 1e-6);
  std::string csv = ReadWholeFile(long_run.values["metrics_csv"]).value_or("");
  EXPECT_THAT(csv, HasSubstr("epoch,step,name,value\n"));
  EXPECT_THAT(csv, HasSubstr(",val_accuracy,"));
}

// Validation and test metrics count every sample once, whatever the number of ranks: 101 samples do
// not split evenly over 2 or 3 ranks, whose padded shards (51 + 51, 34 + 34 + 34) would count 1
// sample twice.
TEST(CliTest, EvaluationCountsEverySampleOnceOnAnyNumberOfRanks) {
  const std::string train = WriteClassification("exact_train.csv", 120);
  const std::string data = WriteClassification("exact_test.csv", 101);
  CliRun fit = Cli(absl::StrCat("fit --model ", kModel, " --train ", train,
                                " --max-epochs 2 --lr 0.5 --batch-size 16 --default-root-dir ",
                                Dir("exact")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  double correct_on_one = -1, loss_on_one = -1;
  for (int ranks : {1, 2, 3, 4}) {
    CliRun test =
        Cli(absl::StrCat("test --model ", kModel, " --data ", data, " --batch-size 8 --checkpoint ",
                         fit.values["checkpoint"], " --nproc-per-node ", ranks));
    ASSERT_EQ(test.exit_code, 0) << test.output;
    // A whole number of the 101 samples (float32 batch means leave ~1e-7); padded, the count would
    // be out of 102 or 104: 67 of 102 reads 66.34.
    const double correct = test.Number("metric.test_accuracy") * 101;
    const double loss = test.Number("metric.test_loss");
    EXPECT_NEAR(correct, std::round(correct), 0.01) << ranks << " ranks";
    std::printf("%d ranks: %.9f correct, test_loss %.9g\n", ranks, correct, loss);
    if (ranks == 1) {
      correct_on_one = std::round(correct);
      loss_on_one = loss;
      EXPECT_GT(correct_on_one, 30);
      EXPECT_LT(correct_on_one, 101);  // else a double count could not change it
      continue;
    }
    EXPECT_EQ(std::round(correct), correct_on_one) << ranks << " ranks";
    // The same per-sample losses, summed in another order (1.8e-8 apart seen).
    EXPECT_NEAR(loss, loss_on_one, 5e-8 * loss_on_one) << ranks << " ranks";
  }
}

// One SGD step of lr 1 moves each weight by its clipped gradient: by value, every element moves at
// most 1e-3 and many move exactly that much; by norm, the whole move has an L2 norm of at most
// 1e-3; unclipped, more.
TEST(CliTest, GradientsAreClippedByValueOrByNorm) {
  const std::string train = WriteClassification("clip.csv", 64);
  const std::string common =
      absl::StrCat("fit --model ", kModel, " --train ", train,
                   " --nproc-per-node 2 --max-steps 1 --batch-size 32 --seed 5 --momentum 0");
  CliRun start = Cli(absl::StrCat(common, " --lr 1e-12 --default-root-dir ", Dir("clip_start")));
  ASSERT_EQ(start.exit_code, 0) << start.output;
  const NamedTensors before = LoadWeights(start.values["checkpoint"]);
  auto moved = [&](const std::string& options, const std::string& dir) {
    CliRun run = Cli(absl::StrCat(common, " --lr 1 ", options, " --default-root-dir ", Dir(dir)));
    EXPECT_EQ(run.exit_code, 0) << run.output;
    std::vector<at::Tensor> deltas;
    for (const auto& [name, weight] : LoadWeights(run.values["checkpoint"])) {
      for (const auto& [other, start_weight] : before) {
        if (other == name) deltas.push_back((weight - start_weight).flatten());
      }
    }
    return at::cat(deltas).abs();
  };
  const at::Tensor unclipped = moved("", "clip_none");
  const at::Tensor by_value =
      moved("--gradient-clip-val 1e-3 --gradient-clip-algorithm value", "clip_value");
  const at::Tensor by_norm = moved("--gradient-clip-val 1e-3", "clip_norm");
  std::printf(
      "max move: unclipped %.9g, by value %.9g (%lld at the clip), by norm %.9g (L2 %.9g)\n",
      unclipped.max().item<double>(), by_value.max().item<double>(),
      static_cast<long long>(by_value.gt(0.999e-3).sum().item<int64_t>()),
      by_norm.max().item<double>(), by_norm.norm().item<double>());
  EXPECT_GT(unclipped.max().item<double>(), 2e-3);
  // At most one float32 rounding (6e-8 for weights below 0.5) past the clip; 2e-9 seen.
  EXPECT_LE(by_value.max().item<double>(), 1e-3 + 6e-8);
  EXPECT_GE(by_value.gt(0.999e-3).sum().item<int64_t>(), 10);
  EXPECT_LE(by_norm.norm().item<double>(), 1e-3 * (1 + 1e-5));
  EXPECT_LT(by_norm.gt(0.999e-3).sum().item<int64_t>(), 2);
}

TEST(CliTest, ResumingIsBitForBitTheSameAsNotStopping) {
  const std::string train = WriteClassification("resume.csv", 100);
  const std::string common =
      absl::StrCat("fit --model ", kModel, " --train ", train,
                   " --nproc-per-node 2 --num-threads 1 --lr 0.3 --momentum 0.9 --batch-size 8",
                   " --max-epochs 5 --seed 11 --optimizer sgd");
  // 100 samples: 50 per rank, 7 batches per epoch; 10 steps stop in the middle of epoch 2.
  CliRun first = Cli(absl::StrCat(common, " --max-steps 10 --default-root-dir ", Dir("k")));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.Number("epoch"), 1);
  CliRun resumed =
      Cli(absl::StrCat(common, " --max-steps 25 --resume-from ", first.values["checkpoint"],
                       " --default-root-dir ", Dir("k_plus_m")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  CliRun straight =
      Cli(absl::StrCat(common, " --max-steps 25 --default-root-dir ", Dir("straight")));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  EXPECT_EQ(resumed.Number("global_step"), 25);
  NamedTensors a = LoadWeights(resumed.values["checkpoint"]);
  NamedTensors b = LoadWeights(straight.values["checkpoint"]);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].second.equal(b[i].second)) << a[i].first << " differs";
  }
  NamedTensors early = LoadWeights(first.values["checkpoint"]);
  EXPECT_FALSE(early[0].second.equal(a[0].second));  // it did train on after resuming
}

TEST(CliTest, PredictKeepsDatasetOrder) {
  const std::string data = WriteClassification("predict.csv", 37);  // not a multiple of 2 ranks
  CliRun fit = Cli(absl::StrCat("fit --model ", kModel, " --train ", data,
                                " --nproc-per-node 2 --max-epochs 40 --lr 0.5 --momentum 0.9",
                                " --batch-size 8 --default-root-dir ", Dir("p")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  CliRun two = Cli(absl::StrCat("predict --model ", kModel, " --data ", data,
                                " --nproc-per-node 2 --checkpoint ", fit.values["checkpoint"],
                                " --default-root-dir ", Dir("p2")));
  CliRun one = Cli(absl::StrCat("predict --model ", kModel, " --data ", data,
                                " --nproc-per-node 1 --checkpoint ", fit.values["checkpoint"],
                                " --default-root-dir ", Dir("p1")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(two.Number("count"), 37);
  // Sharded over 2 ranks and gathered, the rows are those of a single process, in order.
  EXPECT_EQ(ReadWholeFile(two.values["predictions"]).value_or("a"),
            ReadWholeFile(one.values["predictions"]).value_or("b"));
}

TEST(CliTest, BadInputsAreClearErrorsBeforeAnythingRuns) {
  const std::string train = WriteClassification("bad.csv", 20);
  const std::string garbage = Dir("garbage.pt");
  std::ofstream(garbage) << "definitely not a zip archive";
  const std::string truncated = Dir("truncated.npy");
  {
    std::ofstream out(truncated, std::ios::binary);
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 4), }";
    header.resize(118, ' ');
    header += '\n';
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(118 + 1) << '\x00' << header
        << std::string(40, '\0');  // 160 bytes expected
  }
  const std::string labels = Dir("labels.npy");
  const struct {
    std::string args, expected;
  } cases[] = {
      {absl::StrCat("fit --model ", Dir("missing.pt"), " --train ", train),
       "cannot open the model"},
      {absl::StrCat("fit --model ", garbage, " --train ", train), "is not a TorchScript module"},
      {absl::StrCat("fit --model ", kModel, " --train ", truncated, " --train-labels ", labels),
       "truncated.npy"},
      {absl::StrCat("fit --model ", kModel, " --train ", train, " --nproc-per-node 30"),
       "fewer than the 30 ranks"},
      {absl::StrCat("fit --model mlp:4,16,2 --train ", train), "class labels outside [0, 2)"},
      {absl::StrCat("fit --model mlp:5,16,3 --train ", train), "takes 5"},
      {absl::StrCat("fit --model ", kModel, " --train ", train, " --lernrate 3"),
       "unknown option 'lernrate'"},
      {absl::StrCat("fit --model ", kModel, " --train ", train, " --max-epochs x"), "max-epochs"},
      {absl::StrCat("fit --model ", kModel, " --train ", Dir("nope.csv")), "nope.csv"},
      {absl::StrCat("fit --model ", kModel, " --train ", train, " --nnodes 2"), "nnodes"},
      {absl::StrCat("train --model ", kModel), "unknown command 'train'"},
  };
  for (const auto& c : cases) {
    CliRun run = Cli(c.args);
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr("ddpspawn: error:")) << c.args;
    EXPECT_THAT(run.output, HasSubstr(c.expected)) << c.args;
  }
  CliRun fit = Cli(absl::StrCat("fit --model ", kModel, " --train ", train,
                                " --max-epochs 1 --default-root-dir ", Dir("bad_fit")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  CliRun other_shape = Cli(absl::StrCat("validate --model mlp:4,8,3 --data ", train,
                                        " --checkpoint ", fit.values["checkpoint"]));
  EXPECT_EQ(other_shape.exit_code, 2);
  EXPECT_THAT(other_shape.output, HasSubstr("has shape [16, 4] in the checkpoint"));
  CliRun help = Cli("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--nproc-per-node"));
}

// y = x . (0.5, -1, 2, 0.25) + 0.1: labels that are not integers, for a regressor.
std::string WriteRegression(const std::string& name, int rows) {
  std::string path = absl::StrCat(testing::TempDir(), "/", name);
  std::ofstream out(path);
  at::manual_seed(rows);
  at::Tensor x = at::rand({rows, 4});
  at::Tensor y = x.matmul(at::tensor({0.5f, -1.f, 2.f, 0.25f})) + 0.1f;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < 4; ++j) out << x[i][j].item<float>() << ",";
    out << y[i].item<float>() << "\n";
  }
  return path;
}

// The optimizer step `step` in "... at epoch E, step 2 (rank 0); ..." or "... by epoch E, step 2
// (rank 0), ...", or -1.
int64_t StepInError(const std::string& output) {
  const size_t rank = output.find(" (rank ");
  const size_t step = output.rfind("step ", rank);
  int64_t value = -1;
  if (rank == std::string::npos || step == std::string::npos ||
      !absl::SimpleAtoi(output.substr(step + 5, rank - step - 5), &value)) {
    return -1;
  }
  return value;
}

// A diverging run (SGD with lr 1e30: the first step makes the weights about 1e29, the next loss
// overflows) stops on every rank with an error that says where, and leaves on disk only a
// checkpoint from before, with finite weights; allow_non_finite_loss=true lets it go on. Was: exit
// 0 and a checkpoint of NaN weights.
TEST(CliTest, ANonFiniteLossStopsTheRunAndKeepsTheLastGoodCheckpoint) {
  const std::string model = "mlp:4,16,1";
  const std::string train = WriteRegression("diverge.csv", 40);
  // 20 samples per rank and batches of 32: one step per epoch, and a checkpoint after each.
  const std::string common = absl::StrCat(
      "fit --model ", model, " --train ", train,
      " --nproc-per-node 2 --optimizer sgd --lr 1e30 --batch-size 32", " --max-epochs 20 --seed 5");
  const std::string root = Dir("diverged");
  CliRun diverged = Cli(absl::StrCat(common, " --default-root-dir ", root));
  EXPECT_NE(diverged.exit_code, 0) << diverged.output;
  EXPECT_THAT(diverged.output, HasSubstr(" became "));
  EXPECT_THAT(diverged.output, HasSubstr(" epoch "));
  EXPECT_THAT(diverged.output, HasSubstr("pass allow_non_finite_loss=true to go on"));
  EXPECT_EQ(diverged.values.count("checkpoint"), 0u) << diverged.output;
  const int64_t step = StepInError(diverged.output);
  EXPECT_GE(step, 1) << diverged.output;
  const std::string checkpoint = root + "/checkpoints/last.ckpt";
  if (std::filesystem::exists(checkpoint)) {
    EXPECT_THAT(diverged.output, HasSubstr("the last good checkpoint is " +
                                           std::filesystem::absolute(checkpoint).string()));
    std::shared_ptr<LightningModule> module = *MakeMlpModule(model, false, {});
    TrainingState state;
    absl::Status restored =
        RestoreCheckpoint(ReadWholeFile(checkpoint).value_or(""), *module, nullptr, &state);
    ASSERT_TRUE(restored.ok()) << restored;
    EXPECT_LT(state.global_step, step);  // from before the divergence
    for (const auto& [name, tensor] : module->named_state()) {
      EXPECT_TRUE(at::isfinite(tensor).all().item<bool>()) << name << " is not finite";
    }
  } else {
    EXPECT_THAT(diverged.output, HasSubstr("no checkpoint was written before it"));
  }

  CliRun allowed = Cli(
      absl::StrCat(common, " --allow-non-finite-loss true --default-root-dir ", Dir("allowed")));
  ASSERT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_EQ(allowed.Number("global_step"), 20);
}

// --max-time as Lightning's: fit stops after the step that passes it, writes its checkpoint,
// succeeds and says why it stopped; resuming goes on from there.
TEST(CliTest, MaxTimeStopsFitGracefully) {
  const std::string train = WriteClassification("max_time.csv", 240);
  const std::string dir = absl::StrCat(testing::TempDir(), "/max_time");
  CliRun fit =
      Cli(absl::StrCat("fit --model ", kModel, " --train ", train,
                       " --nproc-per-node 2 --max-epochs 100000 --max-time 2 --batch-size 8",
                       " --default-root-dir ", dir));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  EXPECT_EQ(fit.values["stopped_by"], "max_time");
  const double steps = fit.Number("global_step");
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps, 100000.0 * 15);  // 240 rows, 2 ranks, batch 8: 15 steps an epoch
  CliRun resumed = Cli(absl::StrCat("fit --model ", kModel, " --train ", train,
                                    " --nproc-per-node 2 --max-epochs 100000 --max-steps ",
                                    steps + 3, " --batch-size 8 --default-root-dir ", dir,
                                    " --resume-from ", dir, "/checkpoints/last.ckpt"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(resumed.Number("global_step"), steps + 3);
  EXPECT_EQ(resumed.values.count("stopped_by"), 0u);
}

// A validation set the model cannot take (other feature count, class labels beyond its outputs) is
// an error naming the file before any rank starts, not a LibTorch backtrace from rank 0 at the
// first validation.
TEST(CliTest, AValidationSetThatDoesNotFitIsRefusedBeforeAnyRankStarts) {
  const std::string train = WriteClassification("fits.csv", 40);
  const std::string narrow = absl::StrCat(testing::TempDir(), "/narrow.csv");
  const std::string five_classes = absl::StrCat(testing::TempDir(), "/five_classes.csv");
  {
    std::ofstream a(narrow), b(five_classes);
    for (int i = 0; i < 10; ++i) {
      a << "0.1,0.2,0.3," << i % 3 << "\n";
      b << "0.1,0.2,0.3,0.4," << i % 5 << "\n";
    }
  }
  const std::string common = absl::StrCat("fit --model ", kModel, " --train ", train,
                                          " --nproc-per-node 2 --max-epochs 1 --default-root-dir ",
                                          testing::TempDir(), "/fits --val ");
  CliRun features = Cli(common + narrow);
  EXPECT_NE(features.exit_code, 0);
  EXPECT_THAT(features.output, HasSubstr(narrow + " has 3 features per sample; the model "
                                                  "'mlp:4,16,3' takes 4"));
  CliRun classes = Cli(common + five_classes);
  EXPECT_NE(classes.exit_code, 0);
  EXPECT_THAT(classes.output, HasSubstr(five_classes + " has class labels outside [0, 3)"));
  for (const CliRun* run : {&features, &classes}) {
    EXPECT_THAT(run->output, Not(HasSubstr("(pid ")));  // no rank ran
    EXPECT_THAT(run->output, Not(HasSubstr("frame #")));
  }
}

// A resumed fit keeps the learning rate, momentum and weight decay of the optimizer state it
// restores, so one given with another value is refused before any rank starts (it used to be
// ignored without a word). Under a schedule the rate comes from --lr, and a new fit from the
// weights alone (--checkpoint) takes every option.
TEST(CliTest, AnOptimizerOptionTheCheckpointWouldOverrideIsRefused) {
  const std::string train = WriteClassification("overridden.csv", 40);
  const std::string common = absl::StrCat("fit --model ", kModel, " --train ", train,
                                          " --optimizer sgd --default-root-dir ");
  CliRun fit = Cli(absl::StrCat(common, Dir("overridden"),
                                " --max-epochs 1 --lr 0.1 --momentum 0.9 --weight-decay 0.001"));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  const std::string checkpoint = fit.values["checkpoint"];
  const std::string resume =
      absl::StrCat(common, Dir("resumed"), " --max-epochs 2 --resume-from ", checkpoint);
  for (const auto& [option, saved] :
       std::map<std::string, std::string>{{"lr=1e+30", "lr 0.1"},
                                          {"momentum=0.5", "momentum 0.9"},
                                          {"weight_decay=0", "weight_decay 0.001"}}) {
    std::string flag = option;
    std::replace(flag.begin(), flag.end(), '=', ' ');
    CliRun refused = Cli(absl::StrCat(resume, " --", flag));
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_THAT(refused.output,
                HasSubstr(absl::StrCat("option ", option, ": the optimizer state in ", checkpoint,
                                       " has ", saved)));
    EXPECT_THAT(refused.output, Not(HasSubstr("rank 0")));
  }
  CliRun adam = Cli(absl::StrCat(resume, " --optimizer adam"));
  EXPECT_EQ(adam.exit_code, 2) << adam.output;
  EXPECT_THAT(adam.output, HasSubstr(absl::StrCat("checkpoint ", checkpoint,
                                                  ": its optimizer state cannot be restored into "
                                                  "optimizer=adam")));
  for (const std::string& accepted :
       {absl::StrCat(resume, " --lr 0.1 --momentum 0.9 --weight-decay 0.001"), resume,
        absl::StrCat(resume, " --lr 0.05 --lr-scheduler cosine"),
        absl::StrCat(common, Dir("fresh"), " --max-epochs 1 --lr 1e-3 --checkpoint ",
                     checkpoint)}) {
    CliRun run = Cli(accepted);
    EXPECT_EQ(run.exit_code, 0) << accepted << "\n" << run.output;
  }
}

// A checkpoint with 16 flipped bytes is refused by test and by resume, naming the file, before any
// rank starts (it used to load and test to a loss of 1e22); the untouched one still works.
TEST(CliTest, CorruptCheckpointsAreRefused) {
  const std::string train = WriteClassification("corrupt.csv", 40);
  CliRun fit = Cli(absl::StrCat("fit --model mlp:4,256,3 --train ", train,
                                " --max-epochs 1 --default-root-dir ", Dir("corrupt")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  const std::string good = fit.values["checkpoint"];
  std::string bytes = ReadWholeFile(good).value_or("");
  ASSERT_GT(bytes.size(), 4000u);
  for (size_t i = 0; i < 16; ++i) bytes[bytes.size() / 2 + i] ^= 0x5a;
  const std::string bad = Dir("flipped.ckpt");
  std::ofstream(bad, std::ios::binary) << bytes;
  for (const std::string& command :
       {absl::StrCat("test --model mlp:4,256,3 --data ", train, " --checkpoint "),
        absl::StrCat("fit --model mlp:4,256,3 --train ", train,
                     " --max-epochs 2 --default-root-dir ", Dir("corrupt2"), " --resume-from ")}) {
    CliRun refused = Cli(command + bad);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_THAT(refused.output, HasSubstr(absl::StrCat("checkpoint ", bad,
                                                       ": the file is corrupt: "
                                                       "checksum mismatch (stored crc32 ")));
    EXPECT_THAT(refused.output, HasSubstr("it was not loaded"));
    CliRun accepted = Cli(command + good);
    EXPECT_EQ(accepted.exit_code, 0) << accepted.output;
  }
}

// A metrics.csv planted as a link in the output directory (to a file only the job's user may write)
// is refused, and the file it points to is left alone.
TEST(CliTest, ALinkedMetricsCsvIsRefused) {
  const std::string train = WriteClassification("linked.csv", 40);
  const std::string dir = Dir("linked"), victim = Dir("root_only.txt");
  std::filesystem::create_directories(dir);
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(symlink(victim.c_str(), (dir + "/metrics.csv").c_str()), 0);
  CliRun fit = Cli(absl::StrCat("fit --model ", kModel, " --train ", train,
                                " --max-epochs 1 --default-root-dir ", dir));
  EXPECT_EQ(fit.exit_code, 2) << fit.output;  // refused before any rank started
  EXPECT_THAT(fit.output, HasSubstr(dir + "/metrics.csv is a symbolic link"));
  EXPECT_THAT(fit.output, Not(HasSubstr("rank 0")));
  EXPECT_EQ(ReadWholeFile(victim).value_or(""), "precious\n");
}

// --version names what the build was compiled against; asking for a GPU where there is none is a
// clear UNAVAILABLE error from the rank, and the devices flags are checked before anything starts.
// CUDA_VISIBLE_DEVICES= makes every machine one without a GPU for CUDA (tools/gpu_check covers
// GPUs).
TEST(CliTest, VersionAndGpuRequestsWithoutAGpu) {
  const std::string no_gpu = "CUDA_VISIBLE_DEVICES=";
  CliRun version = Cli("--version");
  ASSERT_EQ(version.exit_code, 0) << version.output;
  EXPECT_THAT(version.values["torch"], ::testing::StartsWith("2."));
  EXPECT_THAT(version.values["backends"], ::testing::StartsWith("gloo"));
  if (absl::StrContains(version.values["backends"], "nccl")) {
    EXPECT_NE(version.values["cuda"], "none");
    EXPECT_NE(version.values["nccl"], "none");
  }
  int present = -1;
  EXPECT_TRUE(absl::SimpleAtoi(version.values["cuda_devices"], &present) && present >= 0)
      << version.output;
  CliRun hidden = Cli("--version", no_gpu);
  ASSERT_EQ(hidden.values["cuda_devices"], "0") << hidden.output;

  const std::string train = WriteClassification("gpu.csv", 40);
  const std::string fit = absl::StrCat("fit --model ", kModel, " --train ", train,
                                       " --max-epochs 1 --default-root-dir ", Dir("gpu_fit"));
  // Exit status 1 where a rank found it (CUDA is asked in the ranks, never in a launcher that
  // forks), 2 where the launcher refused the command.
  const struct {
    std::string flags, expected;
    int exit_code;
  } cases[] = {
      {"--process-group-backend nccl --nproc-per-node 2",
       "UNAVAILABLE: backend 'nccl' needs a CUDA device, and no CUDA device is present", 1},
      {"--accelerator cuda", "UNAVAILABLE: rank 0 needs cuda:0, and no CUDA device is present", 1},
      {"--accelerator cuda --devices 1,3",  // whichever rank fails first
       ", and no CUDA device is present", 1},
      {"--precision 16-mixed", "precision '16-mixed' needs CUDA devices", 2},
      {"--devices 0,2", "a list of device indices needs --accelerator cuda", 2},
      {"--devices 3 --nproc-per-node 2", "give one of them", 2},
      {"--devices two", "neither a device count", 2},
      {"--accelerator tpu", "expected 'cpu' or 'cuda'", 2},
      {"--process-group-backend mpi", "expected 'gloo' or 'nccl'", 2},
  };
  for (const auto& c : cases) {
    CliRun run = Cli(absl::StrCat(fit, " ", c.flags), no_gpu);
    EXPECT_EQ(run.exit_code, c.exit_code) << c.flags << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.expected)) << c.flags;
  }
  // --devices N on the CPU: N ranks, each with half of the 40 samples.
  CliRun two = Cli(absl::StrCat(fit, " --devices 2 --batch-size 5"), no_gpu);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(two.Number("global_step"), 4) << two.output;
}

// Scripts a module with tools/setup's Python (its torch 2.11; tests/testing/venv.h); false when it
// cannot.
bool ScriptModule(const std::string& path, const std::string& body) {
  const std::string script = Dir("make_module.py");
  std::ofstream(script) << "import torch\nfrom typing import Dict, List\n"
                        << "class M(torch.nn.Module):\n"
                        << "    def __init__(self):\n"
                        << "        super().__init__()\n"
                        << "        self.net = torch.nn.Linear(4, 3)\n"
                        << body << "torch.jit.script(M()).save('" << path << "')\n";
  return std::system(
             absl::StrCat(testing_support::VenvPython(), " ", script, " 2>/dev/null").c_str()) == 0;
}

TEST(CliTest, TorchScriptModulesTrainAndAreChecked) {
  const std::string train = WriteClassification("script.csv", 120);
  const std::string good = Dir("good.pt");
  if (!ScriptModule(good, R"(
    @torch.jit.export
    def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
    @torch.jit.export
    def validation_step(self, batch: List[torch.Tensor], batch_idx: int) -> Dict[str, torch.Tensor]:
        out = self.net(batch[0])
        return {"val_loss": torch.nn.functional.cross_entropy(out, batch[1])}
)")) {
    FAIL() << testing_support::VenvPython() << " cannot script a torch module here";
  }
  CliRun fit = Cli(absl::StrCat("fit --model ", good, " --train ", train, " --val ", train,
                                " --nproc-per-node 2 --max-epochs 20 --lr 0.5 --momentum 0.9",
                                " --default-root-dir ", Dir("script")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  EXPECT_LT(fit.Number("metric.val_loss"), 0.8);  // from about ln 3 = 1.1

  const std::string missing = Dir("no_training_step.pt");
  ASSERT_TRUE(ScriptModule(missing, R"(
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
)"));
  CliRun no_step = Cli(absl::StrCat("fit --model ", missing, " --train ", train));
  EXPECT_EQ(no_step.exit_code, 2);
  EXPECT_THAT(no_step.output, HasSubstr("has no method 'training_step'"));
  EXPECT_THAT(no_step.output, HasSubstr("batch: List[Tensor], batch_idx: int"));

  // sync_batchnorm cannot convert a TorchScript model's layers: refused before any rank starts
  // (was: in every rank's Setup, exit 1).
  CliRun sync_bn = Cli(absl::StrCat("fit --model ", good, " --train ", train,
                                    " --sync-batchnorm true --max-epochs 1"));
  EXPECT_EQ(sync_bn.exit_code, 2) << sync_bn.output;
  EXPECT_THAT(sync_bn.output, HasSubstr("this is a TorchScript model"));
  EXPECT_THAT(sync_bn.output, Not(HasSubstr("rank 0")));

  CliRun no_predict = Cli(absl::StrCat("predict --model ", good, " --data ", train));
  EXPECT_EQ(no_predict.exit_code, 2);
  EXPECT_THAT(no_predict.output, HasSubstr("predicting needs predict_step"));

  const std::string wrong = Dir("wrong_signature.pt");
  ASSERT_TRUE(ScriptModule(wrong, R"(
    @torch.jit.export
    def training_step(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).sum()
)"));
  CliRun bad_signature = Cli(absl::StrCat("fit --model ", wrong, " --train ", train));
  EXPECT_EQ(bad_signature.exit_code, 2);
  EXPECT_THAT(bad_signature.output, HasSubstr("'training_step' has the signature"));

  // The good module with a data.pkl whose LONG_BINPUT asks for memo entry 2^31 - 1: LibTorch's
  // unpickler would allocate 32 GB for it; it is refused unread.
  const std::string bomb = Dir("memo_bomb.pt");
  const std::string rewrite = Dir("rewrite.py");
  std::ofstream(rewrite) << "import zipfile\n"
                         << "src = zipfile.ZipFile('" << good << "')\n"
                         << "with zipfile.ZipFile('" << bomb << "', 'w') as out:\n"
                         << "    for info in src.infolist():\n"
                         << "        data = src.read(info)\n"
                         << "        if info.filename.endswith('/data.pkl'):\n"
                         << "            data = b'\\x80\\x02r\\xff\\xff\\xff\\x7f.'\n"
                         << "        out.writestr(info.filename, data)\n";
  ASSERT_EQ(std::system(absl::StrCat("python3 ", rewrite).c_str()), 0);
  CliRun memo_bomb = Cli(absl::StrCat("fit --model ", bomb, " --train ", train));
  EXPECT_EQ(memo_bomb.exit_code, 2);
  EXPECT_THAT(memo_bomb.output, HasSubstr("memo index 2147483647"));
}

}  // namespace
}  // namespace ddpspawn
