// The Trainer on a program's own torch::nn::Module and dataset: 2 ranks fit a CNN on synthetic 8x8
// digits (2 loading threads each), writing to ./own_data_logs.
#include <torch/torch.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/loop/trainer.h"

// Ten classes, each a random 8x8 pattern; a sample is its class's pattern plus noise. Get() only
// reads, so the loading threads may call it at once.
class Digits : public ddpspawn::SampleDataset {
 public:
  Digits(int64_t size, uint64_t seed) {
    at::Generator patterns = at::detail::createCPUGenerator(2024);
    at::Generator noise = at::detail::createCPUGenerator(seed);
    labels_ = torch::randint(10, {size}, noise, torch::kLong);
    images_ = torch::randn({10, 1, 8, 8}, patterns).index_select(0, labels_) +
              2.0 * torch::randn({size, 1, 8, 8}, noise);
  }
  int64_t size() const override { return labels_.size(0); }
  absl::StatusOr<std::vector<at::Tensor>> Get(int64_t i) const override {
    return std::vector<at::Tensor>{images_[i], labels_[i]};
  }

 private:
  torch::Tensor images_, labels_;
};

struct CnnImpl : torch::nn::Module {
  torch::nn::Conv2d conv{
      register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))};
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(8 * 4 * 4, 10))};
  torch::Tensor forward(const torch::Tensor& x) {
    return fc(torch::max_pool2d(torch::relu(conv(x)), 2).flatten(1));
  }
};
TORCH_MODULE(Cnn);

class DigitClassifier : public ddpspawn::NnModule {
 public:
  DigitClassifier() : DigitClassifier(Cnn()) {}
  absl::StatusOr<at::Tensor> TrainingStep(const ddpspawn::Batch& b, int64_t) override {
    return torch::cross_entropy_loss(cnn_(b[0]), b[1]);
  }
  absl::StatusOr<ddpspawn::StepMetrics> ValidationStep(const ddpspawn::Batch& b, int64_t) override {
    const torch::Tensor logits = cnn_(b[0]);
    return ddpspawn::StepMetrics{
        {"val_loss", torch::cross_entropy_loss(logits, b[1])},
        {"val_accuracy", logits.argmax(1).eq(b[1]).to(torch::kFloat).mean()}};
  }
  absl::StatusOr<at::Tensor> PredictStep(const ddpspawn::Batch& b, int64_t) override {
    return cnn_(b[0]).argmax(1);
  }
  ddpspawn::OptimizerConfig ConfigureOptimizers() override {
    ddpspawn::OptimizerConfig adam;
    adam.optimizer = ddpspawn::Optimizer::kAdam;
    adam.lr = 0.01;
    return adam;
  }

 private:
  explicit DigitClassifier(Cnn cnn) : NnModule(cnn.ptr()), cnn_(std::move(cnn)) {}
  Cnn cnn_;
};

absl::StatusOr<std::string> Train(ddpspawn::DDPSpawnStrategy& strategy) {
  ddpspawn::TrainerOptions options;
  options.max_epochs = 4;
  options.batch_size = 32;
  options.num_workers = 2;
  options.enable_progress = false;
  options.default_root_dir = "own_data_logs";
  ddpspawn::Trainer trainer(strategy, options);
  const ddpspawn::Dataset train =
      ddpspawn::FromSamples(std::make_shared<Digits>(2048, 1), "digits");
  const ddpspawn::Dataset val =
      ddpspawn::FromSamples(std::make_shared<Digits>(512, 2), "held-out digits");
  absl::StatusOr<ddpspawn::FitResult> fit =
      trainer.Fit(std::make_shared<DigitClassifier>(), train, &val);
  if (!fit.ok()) return fit.status();
  return absl::StrFormat("val_accuracy %.3f after %d steps", fit->metrics.at("val_accuracy"),
                         fit->global_step);
}

int main() {
  ddpspawn::StrategyOptions options;
  options.parallel_devices = {c10::kCPU, c10::kCPU};
  ddpspawn::DDPSpawnStrategy strategy(options);
  if (ddpspawn::IsWorkerProcess()) return strategy.RunWorker(Train);
  absl::StatusOr<std::string> result = strategy.Launch(Train);
  if (!result.ok()) {
    std::fprintf(stderr, "training failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("rank 0: %s\n", result->c_str());
  return 0;
}
