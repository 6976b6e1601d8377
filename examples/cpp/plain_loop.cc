// A LibTorch training loop in one process: a small CNN on synthetic digits, 3 epochs. Its twin,
// fabric_loop.cc, is this loop made data-parallel with ddpspawn::Fabric, five lines changed
// (docs/fabric.md); examples/run_examples.sh checks the count.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "examples/cpp/digits.h"

std::string Train() {
  torch::manual_seed(0);
  auto model = DigitsNet();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto loader = torch::data::make_data_loader(
      SyntheticDigits(2048, /*seed=*/1).map(torch::data::transforms::Stack<>()),
      torch::data::samplers::RandomSampler(2048), /*batch_size=*/32);
  for (int epoch = 0; epoch < 3; ++epoch) {
    model->train();
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      torch::Tensor loss = torch::nll_loss(model(batch.data), batch.target);
      loss.backward();
      optimizer.step();
    }
  }
  return TestAccuracy(*model);
}

int main() { std::printf("%s\n", Train().c_str()); }
