// Run options without ranks (ParseRunOptions, ResolveRunConfig, CheckRun): every integer option is
// range-checked in 64 bits before it is narrowed to its field, non-finite numbers are refused, the
// built-in MLP's labels fit its task (several outputs classify and need integer labels; one output
// regresses), and forked ranks close the caller's descriptors.
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/train/run/run_checks.h"
#include "core/train/run/run_command.h"
#include "core/train/run/run_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<RunConfig> ParseWith(const std::string& key, const std::string& value) {
  RunOptions options = {{"model", "mlp:4,16,3"}, {"train", "train.csv"}};
  options.emplace_back(key, value);
  return ParseRunConfig("fit", options);
}

TEST(RunConfigTest, CommandsAreParsedOnceAndNamedInMessages) {
  absl::StatusOr<RunConfig> validate = ParseRunConfig("validate", {{"model", "mlp:4,16,3"}});
  EXPECT_THAT(validate.status().message(), HasSubstr("validate needs option data"));
  absl::StatusOr<RunConfig> test =
      ParseRunConfig("test", {{"model", "mlp:4,16,3"}, {"data", "d.csv"}, {"max_restarts", "1"}});
  EXPECT_THAT(test.status().message(), HasSubstr("not test"));
  absl::StatusOr<RunConfig> train = ParseRunConfig("train", {{"model", "mlp:4,16,3"}});
  EXPECT_THAT(
      train.status().message(),
      HasSubstr("unknown command 'train'; expected 'fit', 'validate', 'test' or 'predict'"));
  absl::StatusOr<RunConfig> predict =
      ParseRunConfig("predict", {{"model", "mlp:4,16,3"}, {"data", "d.csv"}});
  ASSERT_TRUE(predict.ok()) << predict.status();
  EXPECT_EQ(predict->command, Command::kPredict);
  EXPECT_EQ(CommandName(predict->command), "predict");
}

TEST(RunConfigTest, ParsingReadsNoEnvironmentAndResolvingAdoptsTheOuterJob) {
  absl::StatusOr<RunConfig> parsed =
      ParseRunOptions("fit", {{"model", "mlp:4,16,3"}, {"train", "train.csv"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->world_size, 0);  // not resolved yet
  EXPECT_TRUE(parsed->device_indices.empty());

  ClusterInfo torchrun;
  torchrun.kind = ClusterKind::kTorchElastic;
  torchrun.rank = 5;
  torchrun.world_size = 8;
  torchrun.local_world_size = 4;
  RunConfig outer = *parsed;
  ASSERT_TRUE(ResolveRunConfig(outer, RunEnvironment{torchrun, /*in_slurm_job=*/true}).ok());
  EXPECT_EQ(outer.nproc_per_node, 4);
  EXPECT_EQ(outer.world_size, 8);
  EXPECT_EQ(outer.device_indices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(outer.trainer.checkpoint_on_signal, SIGUSR1);  // "auto" inside SLURM

  RunConfig plain = *parsed;
  ASSERT_TRUE(ResolveRunConfig(plain, RunEnvironment{}).ok());
  EXPECT_EQ(plain.nproc_per_node, 1);
  EXPECT_EQ(plain.world_size, 1);
  EXPECT_EQ(plain.trainer.checkpoint_on_signal, 0);

  absl::StatusOr<RunConfig> with_nodes = ParseRunOptions("fit", {{"model", "mlp:4,16,3"},
                                                                 {"train", "train.csv"},
                                                                 {"nnodes", "2"},
                                                                 {"master_addr", "10.0.0.1"}});
  ASSERT_TRUE(with_nodes.ok()) << with_nodes.status();
  EXPECT_THAT(ResolveRunConfig(*with_nodes, RunEnvironment{torchrun, false}).message(),
              HasSubstr("option nnodes: this process is rank 5 of a torchelastic job of 8"));
}

TEST(RunConfigTest, TheOptimizerIsParsedOnce) {
  absl::StatusOr<RunConfig> adamw = ParseWith("optimizer", "adamw");
  ASSERT_TRUE(adamw.ok()) << adamw.status();
  EXPECT_EQ(adamw->optimizer.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(OptimizerClassName(adamw->optimizer.optimizer), "AdamW");
  absl::StatusOr<RunConfig> rmsprop = ParseWith("optimizer", "rmsprop");
  ASSERT_TRUE(rmsprop.ok()) << rmsprop.status();
  EXPECT_EQ(OptimizerClassName(rmsprop->optimizer.optimizer), "RMSprop");
  EXPECT_THAT(ParseWith("optimizer", "lbfgs").status().message(),
              HasSubstr("unknown optimizer 'lbfgs'; expected 'sgd', 'adam', 'adamw', 'rmsprop' or "
                        "'adagrad'"));
}

// An option the chosen optimizer does not have is refused before any rank starts, not ignored.
TEST(RunConfigTest, OptionsTheOptimizerLacksAreRefused) {
  // The default optimizer is SGD.
  EXPECT_THAT(ParseWith("betas", "0.8,0.9").status().message(),
              HasSubstr("betas are Adam's and AdamW's, not SGD's"));
  EXPECT_THAT(ParseWith("eps", "1e-6").status().message(),
              HasSubstr("eps is not an option of SGD"));
  absl::StatusOr<RunConfig> adam = ParseRunConfig(
      "fit",
      {{"model", "mlp:4,16,3"}, {"train", "t.csv"}, {"optimizer", "adam"}, {"momentum", "0.9"}});
  EXPECT_THAT(adam.status().message(), HasSubstr("momentum is SGD's and RMSprop's, not Adam's"));
  EXPECT_THAT(ParseWith("betas", "0.9").status().message(),
              HasSubstr("two numbers in [0, 1), such as 0.9,0.999"));
}

TEST(RunConfigTest, IntegersOutOfRangeAreErrorsNotWrappedValues) {
  const struct {
    std::string key, value, expected;
  } cases[] = {
      // Was 2 ranks (4294967298 mod 2^32), and std::length_error for 2^31.
      {"nproc_per_node", "4294967298",
       "option nproc_per_node='4294967298': expected an integer in [1, 65536]"},
      {"nproc_per_node", "2147483648", "expected an integer in [1, 65536]"},
      {"nproc-per-node", "0", "option nproc-per-node='0': expected an integer in [1, 65536]"},
      // Was -1, the last column.
      {"label_column", "4294967295", "expected an integer in [-2147483648, 2147483647]"},
      // Overflowed the batch count: 0 steps and success.
      {"batch_size", "9223372036854775807", "expected an integer in [1, 2147483647]"},
      {"batch_size", "0", "expected an integer in [1, 2147483647]"},
      {"num_threads", "100000", "expected an integer in [0, 1024]"},
      {"master_port", "70000", "expected an integer in [0, 65535]"},
      {"master_port", "-1", "expected an integer in [0, 65535]"},
      {"accumulate_grad_batches", "4294967297", "expected an integer in [1, 2147483647]"},
      {"check_val_every_n_epoch", "4294967296", "expected an integer in [0, 2147483647]"},
      {"log_every_n_steps", "-1", "expected an integer in [0, 2147483647]"},
      {"nnodes", "4294967297", "expected an integer in [1, 16384]"},
      {"node_rank", "4294967296", "expected an integer in [0, 16383]"},
      {"seed", "-1", "expected an integer in [0, 9223372036854775807]"},
      {"max_steps", "-2", "expected an integer in [-1, 9223372036854775807]"},
      {"max_epochs", "99999999999999999999", "expected an integer in [0, 9223372036854775807]"},
      {"max_epochs", "x", "option max_epochs='x': expected an integer"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<RunConfig> config = ParseWith(c.key, c.value);
    ASSERT_FALSE(config.ok()) << c.key << "=" << c.value << " was accepted";
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr(c.expected)) << c.key << "=" << c.value;
  }
}

TEST(RunConfigTest, IntegersAtTheirBoundsAreKept) {
  absl::StatusOr<RunConfig> config = ParseWith("nproc_per_node", "65536");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->nproc_per_node, 65536);
  config = ParseWith("label_column", "-2147483648");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->label_column, -2147483647 - 1);
  config = ParseWith("batch_size", "2147483647");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->trainer.batch_size, 2147483647);
  config = ParseWith("num_threads", "1024");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->trainer.num_threads, 1024);
  for (const char* port : {"1", "65535"}) {
    config = ParseRunConfig("fit", {{"model", "mlp:4,16,3"},
                                    {"train", "train.csv"},
                                    {"nnodes", "2"},
                                    {"master_addr", "10.0.0.1"},
                                    {"master_port", port}});
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->world_size, 2);
  }
  config = ParseWith("seed", "9223372036854775807");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->trainer.seed, 9223372036854775807ull);
}

// A node's place in a job of several: refused when it cannot work, never ignored (a single node's
// ranks meet privately, without the master address).
TEST(RunConfigTest, NodeOptionsThatCannotWorkAreRefused) {
  const struct {
    RunOptions extra;
    std::string expected;
  } cases[] = {
      {{{"nnodes", "2"}}, "nnodes > 1 needs master_addr"},
      {{{"master_port", "29500"}}, "master_addr and master_port are for nnodes > 1"},
      {{{"master_addr", "10.0.0.1"}}, "master_addr and master_port are for nnodes > 1"},
      {{{"nnodes", "2"}, {"node_rank", "2"}, {"master_addr", "a"}},
       "node_rank=2 is outside [0, nnodes=2)"},
  };
  for (const auto& c : cases) {
    RunOptions options = {{"model", "mlp:4,16,3"}, {"train", "train.csv"}};
    options.insert(options.end(), c.extra.begin(), c.extra.end());
    absl::StatusOr<RunConfig> config = ParseRunConfig("fit", options);
    ASSERT_FALSE(config.ok()) << c.expected;
    EXPECT_THAT(config.status().message(), HasSubstr(c.expected));
  }
}

TEST(RunConfigTest, DevicesAreRangeChecked) {
  RunOptions options = {{"model", "mlp:4,16,3"},
                        {"train", "train.csv"},
                        {"accelerator", "cuda"},
                        {"devices", "0,300"}};  // c10::DeviceIndex is int8_t: was cuda:44
  absl::StatusOr<RunConfig> config = ParseRunConfig("fit", options);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("CUDA indices in [0, 127]"));
  config = ParseWith("devices", "100000");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("a device count in [1, 65536]"));
}

TEST(RunConfigTest, NonFiniteNumbersAreRefused) {
  const struct {
    std::string key, value;
  } cases[] = {
      {"lr", "inf"},
      {"lr", "nan"},
      {"lr", "1e400"},
      {"momentum", "inf"},
      {"weight_decay", "nan"},
      {"gradient_clip_val", "inf"},
      {"timeout", "inf"},
      {"step_lr_gamma", "nan"},
      {"lr", "0"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<RunConfig> config = ParseWith(c.key, c.value);
    ASSERT_FALSE(config.ok()) << c.key << "=" << c.value << " was accepted";
    EXPECT_THAT(config.status().message(), HasSubstr(absl::StrCat("option ", c.key, "='", c.value,
                                                                  "': expected a finite "
                                                                  "number >= ")));
  }
  absl::StatusOr<RunConfig> config = ParseWith("lr", "1e30");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.lr, 1e30);
}

// Lightning's meanings: timeout is each collective's limit (30 minutes unless set), max_time a
// graceful limit on fit, as DD:HH:MM:SS or seconds.
TEST(RunConfigTest, TimeoutIsTheCollectivesLimitAndMaxTimeStopsFit) {
  absl::StatusOr<RunConfig> defaults = ParseWith("seed", "0");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(StrategyOptionsFor(*defaults).timeout, absl::Minutes(30));
  EXPECT_EQ(StrategyOptionsFor(*defaults).launch_timeout, absl::InfiniteDuration());
  EXPECT_EQ(defaults->trainer.max_time, absl::InfiniteDuration());
  absl::StatusOr<RunConfig> timeout = ParseWith("timeout", "7.5");
  ASSERT_TRUE(timeout.ok()) << timeout.status();
  EXPECT_EQ(StrategyOptionsFor(*timeout).timeout, absl::Milliseconds(7500));
  for (const auto& [value, expected] : std::vector<std::pair<std::string, absl::Duration>>{
           {"00:01:02:03", absl::Hours(1) + absl::Minutes(2) + absl::Seconds(3)},
           {"01:00:00:00", absl::Hours(24)},
           {"90", absl::Seconds(90)}}) {
    absl::StatusOr<RunConfig> config = ParseWith("max_time", value);
    ASSERT_TRUE(config.ok()) << value << ": " << config.status();
    EXPECT_EQ(config->trainer.max_time, expected) << value;
  }
  for (const std::string bad : {"0", "-5", "1:2:3", "00:00:-1:00", "soon", "inf"}) {
    absl::StatusOr<RunConfig> config = ParseWith("max_time", bad);
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_THAT(config.status().message(),
                HasSubstr("expected DD:HH:MM:SS or a number of seconds"));
  }
  EXPECT_FALSE(ParseWith("timeout", "0").ok());
}

TEST(RunConfigTest, AllowNonFiniteLossIsAnOption) {
  absl::StatusOr<RunConfig> config = ParseWith("seed", "1");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->trainer.allow_non_finite_loss);
  config = ParseWith("allow_non_finite_loss", "true");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->trainer.allow_non_finite_loss);
  config = ParseWith("allow-non-finite-loss", "maybe");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("expected true or false"));
  EXPECT_THAT(RunOptionsHelp(), HasSubstr("--allow-non-finite-loss"));
}

// One table parses the options and writes --help: every flag in the help is accepted (with its
// documented default as the value), and the defaults shown are a fresh RunConfig's.
TEST(RunConfigTest, TheHelpListsEveryOptionWithItsDefault) {
  const std::string help = RunOptionsHelp();
  EXPECT_THAT(help, HasSubstr("--max-epochs N              (default 10)"));
  EXPECT_THAT(help, HasSubstr("--precision 32-true|bf16-mixed|16-mixed"));
  EXPECT_THAT(help, HasSubstr("(default 32-true)"));
  int flags = 0;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (!absl::StartsWith(line, "  --")) continue;
    ++flags;
    std::string flag(line.substr(4, line.find(' ', 4) - 4));
    const size_t at = line.find("(default ");
    if (at == absl::string_view::npos || flag == "model" || flag == "train") continue;
    std::string value(line.substr(at + 9, line.find(')', at) - at - 9));
    absl::StatusOr<RunConfig> config = ParseWith(flag, value);
    EXPECT_TRUE(config.ok()) << flag << "=" << value << ": " << config.status();
  }
  EXPECT_GE(flags, 45);
  EXPECT_EQ(ParseWith("no-such-option", "1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RunConfigTest, ForkedRanksKeepNoneOfTheCallersDescriptors) {
  absl::StatusOr<RunConfig> config = ParseWith("start_method", "fork");
  ASSERT_TRUE(config.ok()) << config.status();
  const StrategyOptions options = StrategyOptionsFor(*config);
  EXPECT_EQ(options.start_method, StartMethod::kFork);
  EXPECT_TRUE(options.fork_close_descriptors);  // the ranks open everything by name
}

// --- The built-in MLP's labels (CheckRun loads the data and dry-runs the
// model, with no rank).

std::string WriteFile(const std::string& name, const std::string& bytes) {
  std::string path = absl::StrCat(testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// A .npy file (format 1.0) of `values` with NumPy's `descr` and `shape`.
template <typename T>
std::string WriteNpy(const std::string& name, const std::string& descr, const std::string& shape,
                     const std::vector<T>& values) {
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict.push_back('\n');
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(dict.size() & 0xff));
  bytes.push_back(static_cast<char>(dict.size() >> 8));
  std::string data(values.size() * sizeof(T), '\0');
  std::memcpy(data.data(), values.data(), data.size());
  return WriteFile(name, bytes + dict + data);
}

absl::Status Check(const std::string& model, const std::string& train,
                   const std::string& train_labels = "") {
  RunOptions options = {{"model", model}, {"train", train}};
  if (!train_labels.empty()) options.emplace_back("train_labels", train_labels);
  absl::StatusOr<RunConfig> config = ParseRunConfig("fit", options);
  if (!config.ok()) return config.status();
  return CheckRun(*config);
}

TEST(RunConfigTest, AClassifierRefusesALabelThatIsNotAnInteger) {
  // Was a regressor (every label float32) with a broadcasting loss.
  const std::string csv = WriteFile("half_label.csv", "a,b,y\n0.1,0.2,0\n0.3,0.4,1\n0.5,0.6,3.5\n");
  absl::Status status = Check("mlp:2,8,4", csv);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'mlp:2,8,4' has 4 outputs"));
  EXPECT_THAT(status.message(), HasSubstr("so it is a classifier"));
  EXPECT_THAT(status.message(), HasSubstr(csv + ":4: column 3 (\"y\"): label \"3.5\""));

  const std::string x =
      WriteNpy<float>("x.npy", "<f4", "(3, 2)", {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
  const std::string y = WriteNpy<double>("y_half.npy", "<f8", "(3,)", {0, 1.5, 2});
  status = Check("mlp:2,8,3", x, y);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("so it is a classifier"));
  EXPECT_THAT(status.message(), HasSubstr(y + ": row 1 (counted from 0): label 1.5"));
  // Integral float labels (as pandas often saves them) are class indices.
  const std::string y_integral = WriteNpy<double>("y_integral.npy", "<f8", "(3,)", {0, 2, 1});
  EXPECT_TRUE(Check("mlp:2,8,3", x, y_integral).ok()) << Check("mlp:2,8,3", x, y_integral);
}

TEST(RunConfigTest, OneOutputRegressesEvenOnIntegralLabels) {
  // Was a one-class classifier: "class labels outside [0, 1)".
  const std::string csv = WriteFile("counts.csv", "0.1,0.2,3\n0.3,0.4,7\n0.5,0.6,12\n");
  absl::Status status = Check("mlp:2,8,1", csv);
  EXPECT_TRUE(status.ok()) << status;
  // k labels per sample need k outputs.
  const std::string x = WriteNpy<float>("x2.npy", "<f4", "(2, 2)", {0.1f, 0.2f, 0.3f, 0.4f});
  const std::string y = WriteNpy<float>("y2.npy", "<f4", "(2, 2)", {1.5f, 2.5f, 3.5f, 4.5f});
  EXPECT_TRUE(Check("mlp:2,8,2", x, y).ok()) << Check("mlp:2,8,2", x, y);
  status = Check("mlp:2,8,3", x, y);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr("has 2 labels per sample; the model 'mlp:2,8,3' gives 3"));
}

// sync_batchnorm on a model without BatchNorm layers (the built-in MLP) would change nothing:
// refused before any rank starts. Was: accepted, and ignored.
TEST(RunConfigTest, SyncBatchnormWithoutABatchNormLayerIsRefused) {
  const std::string csv = WriteFile("sync_bn.csv", "0.1,0.2,0\n0.3,0.4,1\n0.5,0.6,2\n");
  absl::StatusOr<RunConfig> config =
      ParseRunConfig("fit", {{"model", "mlp:2,8,3"}, {"train", csv}, {"sync_batchnorm", "true"}});
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::Status status = CheckRun(*config);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model mlp:2,8,3: sync_batchnorm: the model has no "
                                          "BatchNorm layer to convert"));
  config->sync_batchnorm = false;
  EXPECT_TRUE(CheckRun(*config).ok()) << CheckRun(*config);
}

TEST(RunConfigTest, NonFiniteDataIsRefusedNamingTheFile) {
  const std::string csv = WriteFile("nan_label.csv", "0.1,0.2,0\n0.3,0.4,nan\n");
  absl::Status status = Check("mlp:2,8,3", csv);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(csv + ":2: column 3: \"nan\" is not a finite number"));
}

// A fit of the built-in MLP with `extra` options.
absl::StatusOr<RunConfig> FitWith(const RunOptions& extra) {
  RunOptions options = {{"model", "mlp:4,16,3"}, {"train", "train.csv"}};
  options.insert(options.end(), extra.begin(), extra.end());
  return ParseRunConfig("fit", options);
}

TEST(RunConfigTest, PostLocalSgdOptionsGoTogether) {
  EXPECT_THAT(FitWith({{"model_averaging_period", "4"}}).status().message(),
              HasSubstr("model_averaging_period is ddp_comm_hook post_localsgd's; this run's "
                        "hook is allreduce"));
  EXPECT_THAT(FitWith({{"ddp_comm_hook", "powersgd"}, {"post_local_gradient_allreduce", "false"}})
                  .status()
                  .message(),
              HasSubstr("post_local_gradient_allreduce is ddp_comm_hook post_localsgd's"));
  EXPECT_THAT(FitWith({{"ddp_comm_hook", "post_localsgd"}}).status().message(),
              HasSubstr("post_localsgd needs model_averaging_period"));
  EXPECT_THAT(FitWith({{"ddp_comm_hook", "post_localsgd"},
                       {"model_averaging_period", "4"},
                       {"zero_redundancy_optimizer", "true"}})
                  .status()
                  .message(),
              HasSubstr("do not combine"));
  EXPECT_THAT(FitWith({{"ddp_comm_hook", "post_localsgd"}, {"model_averaging_period", "0"}})
                  .status()
                  .message(),
              HasSubstr("model_averaging_period"));
  absl::StatusOr<RunConfig> config = FitWith({{"ddp_comm_hook", "post_localsgd"},
                                              {"model_averaging_period", "4"},
                                              {"post_localsgd_start_iteration", "8"},
                                              {"post_local_gradient_allreduce", "false"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ddp_comm_hook, CommHookKind::kPostLocalSgd);
  EXPECT_EQ(config->model_averaging_period, 4);
  EXPECT_EQ(config->post_localsgd_start_iteration, 8);
  EXPECT_FALSE(config->post_local_gradient_allreduce);
}

TEST(RunConfigTest, ShardGradOpRefusesWhatWouldNotShard) {
  absl::StatusOr<RunConfig> config = FitWith({{"sharding_strategy", "shard_grad_op"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_THAT(
      FitWith({{"sharding_strategy", "shard_grad_op"}, {"zero_redundancy_optimizer", "true"}})
          .status()
          .message(),
      HasSubstr("shard_grad_op shards the optimizer state already"));
  EXPECT_THAT(FitWith({{"sharding_strategy", "shard_grad_op"}, {"ddp_comm_hook", "powersgd"}})
                  .status()
                  .message(),
              HasSubstr("the communication hook 'powersgd' cannot run on it"));
  EXPECT_THAT(FitWith({{"sharding_strategy", "shard_grad_op"}, {"ddp_comm_wrapper", "bf16"}})
                  .status()
                  .message(),
              HasSubstr("'bf16_compress_wrapper' cannot run on it"));
  const absl::Status hybrid = FitWith({{"sharding_strategy", "hybrid_shard"}}).status();
  EXPECT_THAT(hybrid.message(), HasSubstr("hybrid_shard (full_shard within each node, replicas "
                                          "across nodes) is not implemented"));
}

TEST(RunConfigTest, FullShardGoesWithAnyModelButNotZeroOne) {
  absl::StatusOr<RunConfig> config = FitWith({{"sharding_strategy", "full_shard"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_THAT(FitWith({{"sharding_strategy", "full_shard"}, {"zero_redundancy_optimizer", "true"}})
                  .status()
                  .message(),
              HasSubstr("full_shard shards the optimizer state already"));
  EXPECT_TRUE(FitWith({{"sharding_strategy", "full_shard"}, {"model", "gpt.pt"}}).ok());
}

}  // namespace
}  // namespace ddpspawn
