// The workloads tools/bench trains, in C++ (tools/benchmarks/bench_models.py builds the same ones
// for the Python references): "mlp" (784-1024-1024-10), "conv" (two 3x3 conv layers, then
// 3136-128-10), "conv_bn" (the same with BatchNorm), "resnet18" (ResNet-18 for 32x32 images, as for
// CIFAR-10) and "gpt" (a causal transformer: 4 layers, 256 wide, 4 heads, sequence 128, vocabulary
// 512), each with its synthetic batch per rank.
#ifndef DDPSPAWN_TOOLS_BENCHMARKS_BENCH_MODELS_H_
#define DDPSPAWN_TOOLS_BENCHMARKS_BENCH_MODELS_H_

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/ddp/full_shard.h"

namespace ddpspawn {

// Plain values; thread-compatible. Owns the module.
struct BenchWorkload {
  std::shared_ptr<torch::nn::Module> module;
  // Logits as (samples, classes), whatever the model's own shape.
  std::function<at::Tensor(const at::Tensor&)> forward;
  // full_shard (mlp and gpt only; empty otherwise): FSDP2's usual units (each Linear of the mlp;
  // each of the gpt's layers, and the model itself for the embeddings, norm and head), and the
  // forward that runs them through a FullShard over `units`.
  std::vector<std::shared_ptr<torch::nn::Module>> units;
  std::function<absl::StatusOr<at::Tensor>(FullShard&, const at::Tensor&)> sharded_forward;
  at::Tensor inputs, targets;  // one batch per rank, on the CPU
};

// The workload of that name (seeded by the caller), or InvalidArgument.
absl::StatusOr<BenchWorkload> MakeBenchWorkload(const std::string& name);

}  // namespace ddpspawn

#endif  // DDPSPAWN_TOOLS_BENCHMARKS_BENCH_MODELS_H_
