// plain_loop.cc made data-parallel with ddpspawn::Fabric: 2 spawned ranks, each drawing its share
// of every epoch as PyTorch's DistributedSampler deals it, gradients averaged as backward runs;
// rank 0's result comes back to the launching process. Five lines differ from plain_loop.cc below
// this comment (docs/fabric.md; examples/run_examples.sh checks the count).
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "core/fabric/fabric.h"
#include "examples/cpp/digits.h"

std::string Train(ddpspawn::Fabric& fabric) {
  torch::manual_seed(0);
  auto model = fabric.Setup(DigitsNet());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto loader = torch::data::make_data_loader(
      SyntheticDigits(2048, /*seed=*/1).map(torch::data::transforms::Stack<>()),
      fabric.Sampler(2048), /*batch_size=*/32);
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

int main() { std::printf("%s\n", ddpspawn::Fabric(2).Launch(Train).value().c_str()); }
