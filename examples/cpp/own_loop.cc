// A LibTorch program of the pytorch/examples kind (its own module, dataset and training loop) made
// data-parallel: 2 spawned ranks, each reading its shard as PyTorch's DistributedSampler deals it,
// train a small CNN on synthetic 8x8 digits in the natural loop, and rank 0 hands back its test
// accuracy. docs/cpp.md walks through what changed from the single-process program.
#include <torch/torch.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "core/env/rank_zero.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/strategy/distribute.h"
#include "core/train/data/torch_data_sampler.h"
#include "examples/cpp/digits.h"

absl::StatusOr<std::string> Train(ddpspawn::DDPSpawnStrategy& strategy) {
  torch::manual_seed(strategy.global_rank());  // Distribute() gives every rank rank 0's weights
  DigitsNet model;
  absl::StatusOr<ddpspawn::DdpModule<DigitsNetImpl>> ddp = ddpspawn::Distribute(model, strategy);
  if (!ddp.ok()) return ddp.status();
  SyntheticDigits train(2048, /*seed=*/1);
  absl::StatusOr<ddpspawn::PyTorchDistributedSampler> sampler =
      ddpspawn::PyTorchDistributedSampler::Create(2048, strategy.world_size(),
                                                  strategy.global_rank());
  if (!sampler.ok()) return sampler.status();
  auto loader = torch::data::make_data_loader(train.map(torch::data::transforms::Stack<>()),
                                              *std::move(sampler), /*batch_size=*/32);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int epoch = 1; epoch <= 3; ++epoch) {  // each pass over the loader is the next epoch
    model->train();
    float loss_sum = 0;
    int batches = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      torch::Tensor loss = torch::nll_loss((*ddp)(batch.data), batch.target);
      loss.backward();  // gradients averaged across the ranks
      optimizer.step();
      loss_sum += loss.item<float>();
      ++batches;
    }
    ddpspawn::RankZeroPrint(absl::StrFormat("epoch %d: rank 0's loss %.4f\n", epoch,
                                            loss_sum / static_cast<float>(batches)));
  }
  if (!strategy.is_global_zero()) return std::string();
  return TestAccuracy(*model);
}

int main() {
  if (ddpspawn::IsFirstProcessOfJob())
    std::printf("own_loop: a CNN on synthetic digits, 2 ranks\n");
  ddpspawn::StrategyOptions options;
  options.parallel_devices = {c10::kCPU, c10::kCPU};
  ddpspawn::DDPSpawnStrategy strategy(options);
  if (ddpspawn::IsWorkerProcess()) return strategy.RunWorker(Train);
  absl::StatusOr<std::string> result = strategy.Launch(Train);
  if (!result.ok()) {
    std::fprintf(stderr, "training failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("rank 0 tested: %s\n", result->c_str());
  return 0;
}
