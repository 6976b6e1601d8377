// DDPSpawnStrategy in real multi-process runs (tests/strategy/strategy_main, both start methods and
// both precisions), plus the errors a single process can see.
#include <sys/wait.h>
#include <torch/nn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/comm/process_group.h"
#include "core/ddp/sync_batch_norm.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// Runs the program with its output in a file; returns the exit code and the output.
std::pair<int, std::string> RunProgram(const std::vector<std::string>& args) {
  std::string out_path = absl::StrCat(testing::TempDir(), "/out-", getpid(), "-", args[1]);
  std::string command = "tests/strategy/strategy_main";
  for (const std::string& a : args) absl::StrAppend(&command, " '", a, "'");
  absl::StrAppend(&command, " > '", out_path, "' 2>&1");
  int status = std::system(command.c_str());
  std::ifstream in(out_path);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

class StrategyApiTest : public testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(StrategyApiTest, EveryMethodInTwoRanks) {
  const auto& [method, precision] = GetParam();
  auto [code, output] = RunProgram({method, precision, testing::TempDir()});
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("rank 0: ok: loss"));
}

INSTANTIATE_TEST_SUITE_P(Methods, StrategyApiTest,
                         testing::Combine(testing::Values("spawn", "fork", "forkserver"),
                                          testing::Values("32-true", "bf16-mixed", "scaled-32")));

TEST(StrategySingleProcessTest, ErrorsAreStatuses) {
  StrategyOptions options;
  options.cluster_environment = []() -> absl::StatusOr<ClusterInfo> { return ClusterInfo{}; };
  DDPSpawnStrategy strategy(options);
  EXPECT_EQ(strategy.Setup(nullptr).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(strategy.Barrier("not distributed yet").ok());
  EXPECT_EQ(*strategy.Broadcast("alone"), "alone");
  ASSERT_TRUE(strategy.SetupDistributed().ok());
  EXPECT_EQ(strategy.world_size(), 1);
  EXPECT_EQ(strategy.Setup(nullptr).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(strategy.Teardown().ok());

  // A device past this machine's last one, with or without GPUs: what the rank that asks for it is
  // told.
  const int present = CudaDeviceCount();
  const std::string lacking = present == 0
                                  ? std::string("no CUDA device is present")
                                  : absl::StrCat("this machine has ", present, " CUDA device");

  // nccl needs cuda:<local rank> (on the CPU accelerator): local rank `present` has none.
  StrategyOptions nccl = options;
  nccl.process_group_backend = Backend::kNccl;
  nccl.parallel_devices.assign(present + 1, c10::Device(c10::kCPU));
  nccl.cluster_environment = [present]() -> absl::StatusOr<ClusterInfo> {
    ClusterInfo cluster;
    cluster.rank = cluster.local_rank = present;
    cluster.world_size = cluster.local_world_size = present + 1;
    return cluster;
  };
  DDPSpawnStrategy gpu_strategy(nccl);
  absl::Status no_gpu = gpu_strategy.SetupDistributed();
  EXPECT_EQ(no_gpu.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(no_gpu.message(), HasSubstr(NcclAvailable() ? lacking : "a CUDA build of LibTorch"));

  // Local rank i runs on parallel_devices[i], whatever its index.
  const int missing = std::max(3, present);
  StrategyOptions cuda = options;
  cuda.accelerator = Accelerator::kCuda;
  cuda.parallel_devices = {c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(missing))};
  DDPSpawnStrategy cuda_strategy(cuda);
  EXPECT_EQ(cuda_strategy.root_device(),
            c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(missing)));
  EXPECT_EQ(cuda_strategy.process_group_backend(), Backend::kNccl);
  absl::Status no_cuda = cuda_strategy.SetupDistributed();
  EXPECT_EQ(no_cuda.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(no_cuda.message(), HasSubstr(absl::StrCat("needs cuda:", missing)));
  EXPECT_THAT(no_cuda.message(), HasSubstr(lacking));

  StrategyOptions mixed_up = options;
  mixed_up.accelerator = Accelerator::kCuda;  // with the default CPU parallel_devices
  EXPECT_EQ(DDPSpawnStrategy(mixed_up).SetupDistributed().code(),
            absl::StatusCode::kInvalidArgument);

  StrategyOptions fp16 = options;
  fp16.precision_plugin = MakePrecisionPlugin(Precision::k16Mixed);
  absl::Status fp16_on_cpu = DDPSpawnStrategy(fp16).SetupDistributed();
  EXPECT_EQ(fp16_on_cpu.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(fp16_on_cpu.message(), HasSubstr("needs CUDA devices"));

  EXPECT_NE(MakePrecisionPlugin(Precision::k16Mixed)->grad_scaler(), nullptr);
  EXPECT_EQ(MakePrecisionPlugin(Precision::kBf16Mixed)->grad_scaler(), nullptr);
}

TEST(StrategyTest, NamesParseOnceIntoEnums) {
  EXPECT_EQ(ParsePrecision("8-bit").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAccelerator("tpu").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseAccelerator("gpu"), Accelerator::kCuda);
  EXPECT_EQ(*ParsePrecision("32"), Precision::k32True);
  EXPECT_EQ(*ParseReduceOp("avg"), ReduceOp::kMean);
  EXPECT_EQ(ParseReduceOp("median").status().code(), absl::StatusCode::kInvalidArgument);
  for (Precision p : {Precision::k32True, Precision::kBf16Mixed, Precision::k16Mixed}) {
    EXPECT_EQ(*ParsePrecision(PrecisionName(p)), p);
    EXPECT_EQ(MakePrecisionPlugin(p)->name(), PrecisionName(p));
  }
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    EXPECT_EQ(*ParseReduceOp(ReduceOpName(op)), op);
  }
  for (Backend b : {Backend::kGloo, Backend::kNccl}) EXPECT_EQ(*ParseBackend(BackendName(b)), b);
  for (CommHookKind k : {CommHookKind::kAllReduce, CommHookKind::kFp16, CommHookKind::kBf16,
                         CommHookKind::kPowerSgd}) {
    EXPECT_EQ(*ParseCommHook(CommHookName(k)), k);
  }
}

// An NnModule for checks that never train.
class Network : public NnModule {
 public:
  using NnModule::NnModule;
  absl::StatusOr<at::Tensor> TrainingStep(const Batch&, int64_t) override { return at::Tensor(); }
  absl::StatusOr<StepMetrics> ValidationStep(const Batch&, int64_t) override {
    return StepMetrics();
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch&, int64_t) override { return at::Tensor(); }
};

TEST(StrategyTest, SyncBatchnormNeedsABatchNormLayer) {
  Network plain(torch::nn::Sequential(torch::nn::Linear(4, 1)).ptr());
  const absl::Status refused = ApplySyncBatchNorm(plain);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("no BatchNorm layer to convert"));
  Network normalized(
      torch::nn::Sequential(torch::nn::BatchNorm1d(4), torch::nn::Linear(4, 1)).ptr());
  EXPECT_TRUE(ApplySyncBatchNorm(normalized).ok());
  EXPECT_NE(normalized.network()->modules()[1]->as<SyncBatchNormImpl>(), nullptr);
  // Converted already (Setup again): nothing to convert, nothing refused.
  EXPECT_TRUE(ApplySyncBatchNorm(normalized).ok());
}

TEST(StrategyFailureTest, AFailingRankIsReported) {
  StrategyOptions options;
  options.parallel_devices = {c10::Device(c10::kCPU), c10::Device(c10::kCPU)};
  options.start_method = StartMethod::kFork;
  options.launch_timeout = absl::Seconds(60);
  DDPSpawnStrategy strategy(options);
  absl::StatusOr<std::string> result =
      strategy.Launch([](DDPSpawnStrategy& s) -> absl::StatusOr<std::string> {
        if (s.global_rank() == 1) return absl::InvalidArgumentError("rank 1 has a bad batch");
        return std::string("unreachable");
      });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(result.status().message(), HasSubstr("rank 1"));
  EXPECT_THAT(result.status().message(), HasSubstr("rank 1 has a bad batch"));
}

}  // namespace
}  // namespace ddpspawn
