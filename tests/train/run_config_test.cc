// Run options without ranks (ParseRunConfig): every integer option is
// range-checked in 64 bits before it is narrowed to its field, and non-finite
// numbers are refused.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/train/run.h"
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
  for (const char* port : {"0", "65535"}) {
    config = ParseWith("master_port", port);
    ASSERT_TRUE(config.ok()) << config.status();
  }
  config = ParseWith("seed", "9223372036854775807");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->trainer.seed, 9223372036854775807ull);
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

}  // namespace
}  // namespace ddpspawn
