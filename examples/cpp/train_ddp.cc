// DDPSpawnStrategy from C++: 2 spawned ranks train a linear regression with DistributedDataParallel
// (each rank on its own half of the data) and hand the learned weights back to the launcher.
#include <torch/torch.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "core/strategy/ddp_spawn_strategy.h"

using ddpspawn::Batch;

class LinearRegression : public ddpspawn::NnModule {
 public:
  LinearRegression() : LinearRegression(torch::nn::Linear(3, 1)) {}
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& b, int64_t) override {
    return torch::mse_loss(net_->forward(b[0]), b[1]);
  }
  absl::StatusOr<ddpspawn::StepMetrics> ValidationStep(const Batch& b, int64_t) override {
    return ddpspawn::StepMetrics{{"val_loss", torch::mse_loss(net_->forward(b[0]), b[1])}};
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch& b, int64_t) override {
    return net_->forward(b[0]);
  }

 private:
  explicit LinearRegression(const torch::nn::Linear& net) : NnModule(net.ptr()), net_(net) {}
  torch::nn::Linear net_;
};

absl::StatusOr<std::string> Train(ddpspawn::DDPSpawnStrategy& strategy) {
  auto module = std::make_shared<LinearRegression>();
  if (absl::Status s = strategy.Setup(module); !s.ok()) return s;  // wraps it in DDP
  torch::manual_seed(strategy.global_rank());                      // each rank its own data
  at::Tensor x = torch::randn({256, 3});
  at::Tensor y = x.matmul(torch::tensor({{2.0f}, {-1.0f}, {0.5f}})) + 3.0f;
  torch::optim::SGD optimizer(module->parameters(), 0.1);
  for (int step = 0; step < 200; ++step) {
    optimizer.zero_grad();
    absl::StatusOr<at::Tensor> loss = strategy.TrainingStep({x, y}, step);
    if (!loss.ok()) return loss.status();
    // Backward (loss scaled under "16-mixed"; gradients averaged across the ranks here), then the
    // step (unscaled; skipped on every rank on an inf).
    if (absl::Status s = strategy.Backward(*loss); !s.ok()) return s;
    if (absl::Status s = strategy.OptimizerStep(optimizer).status(); !s.ok()) return s;
  }
  auto params = module->parameters();
  return absl::StrFormat("weights %.3f %.3f %.3f, bias %.3f", params[0][0][0].item<float>(),
                         params[0][0][1].item<float>(), params[0][0][2].item<float>(),
                         params[1][0].item<float>());
}

int main() {
  ddpspawn::ServeForksIfForkserver();  // needed for start_method forkserver only
  ddpspawn::StrategyOptions options;
  options.parallel_devices = {c10::kCPU, c10::kCPU};  // 2 ranks
  ddpspawn::DDPSpawnStrategy strategy(options);
  if (ddpspawn::IsWorkerProcess()) return strategy.RunWorker(Train);
  absl::StatusOr<std::string> result = strategy.Launch(Train);
  if (!result.ok()) {
    std::fprintf(stderr, "training failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("rank 0 learned: %s\n", result->c_str());
  return 0;
}
