// The benchmark workloads (see bench_models.h).
#include "tools/benchmarks/bench_models.h"

#include <torch/torch.h>

#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ddpspawn {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// ResNet's basic block: two 3x3 convolutions with BatchNorm, and a 1x1 projection on the shortcut
// when the shape changes.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", Conv3x3(in, out, stride))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", Conv3x3(out, out, 1))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

// ResNet-18 for 32x32 images: a 3x3 stem without pooling, four stages of two blocks (64, 128, 256,
// 512 channels), global average pooling, 10 classes.
struct ResNet18Impl : nn::Module {
  ResNet18Impl()
      : stem(register_module("stem", Conv3x3(3, 64, 1))),
        bn(register_module("bn", nn::BatchNorm2d(64))),
        fc(register_module("fc", nn::Linear(512, 10))) {
    int64_t in = 64;
    const int64_t widths[] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; ++stage) {
      for (int block = 0; block < 2; ++block) {
        const int64_t stride = stage > 0 && block == 0 ? 2 : 1;
        blocks->push_back(BasicBlock(in, widths[stage], stride));
        in = widths[stage];
      }
    }
    register_module("blocks", blocks);
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = blocks->forward(torch::relu(bn(stem(x))));
    return fc(torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
  nn::Conv2d stem;
  nn::BatchNorm2d bn;
  nn::Sequential blocks;
  nn::Linear fc;
};
TORCH_MODULE(ResNet18);

constexpr int64_t kGptVocab = 512, kGptWidth = 256, kGptHeads = 4, kGptLayers = 4,
                  kGptSequence = 128;

// A GPT-style causal transformer: token and position embeddings, 4 encoder layers (post-norm, ReLU,
// feed-forward 1024, no dropout) under a causal mask, a final LayerNorm and the vocabulary head.
struct GptImpl : nn::Module {
  GptImpl()
      : tokens(register_module("tokens", nn::Embedding(kGptVocab, kGptWidth))),
        positions(register_module("positions", nn::Embedding(kGptSequence, kGptWidth))),
        norm(register_module("norm", nn::LayerNorm(nn::LayerNormOptions({kGptWidth})))),
        head(register_module("head", nn::Linear(kGptWidth, kGptVocab))) {
    for (int i = 0; i < kGptLayers; ++i) {
      layers.emplace_back(register_module(
          absl::StrCat("layer", i),
          nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(kGptWidth, kGptHeads)
                                          .dim_feedforward(4 * kGptWidth)
                                          .dropout(0.0))));
    }
    mask = torch::triu(
        torch::full({kGptSequence, kGptSequence}, -std::numeric_limits<float>::infinity()), 1);
  }
  // (batch, sequence) tokens -> (batch * sequence, vocabulary) logits.
  at::Tensor forward(const at::Tensor& x) {
    // The mask is no buffer (DDP would broadcast it every step): it follows the input.
    if (mask.device() != x.device()) mask = mask.to(x.device());
    at::Tensor h = tokens(x) + positions(torch::arange(x.size(1), x.options()));  // (B, T, C)
    h = h.transpose(0, 1);                                                        // (T, B, C)
    for (auto& layer : layers) h = layer(h, mask);
    return head(norm(h.transpose(0, 1))).reshape({-1, kGptVocab});
  }
  // forward() with the layers as units 1.. and the rest as unit 0 of `shard`.
  absl::StatusOr<at::Tensor> ShardedForward(FullShard& shard, const at::Tensor& x) {
    if (mask.device() != x.device()) mask = mask.to(x.device());
    absl::Status failed;
    absl::StatusOr<at::Tensor> out = shard.Forward(0, [&] {
      at::Tensor h = tokens(x) + positions(torch::arange(x.size(1), x.options()));
      h = h.transpose(0, 1);
      for (size_t i = 0; i < layers.size() && failed.ok(); ++i) {
        absl::StatusOr<at::Tensor> next = shard.Forward(i + 1, [&] { return layers[i](h, mask); });
        if (next.ok())
          h = *std::move(next);
        else
          failed = next.status();
      }
      return failed.ok() ? head(norm(h.transpose(0, 1))).reshape({-1, kGptVocab}) : at::Tensor();
    });
    if (!failed.ok()) return failed;
    return out;
  }
  nn::Embedding tokens, positions;
  std::vector<nn::TransformerEncoderLayer> layers;
  nn::LayerNorm norm;
  nn::Linear head;
  at::Tensor mask;
};
TORCH_MODULE(Gpt);

template <typename Holder>
BenchWorkload Wrap(Holder model, at::Tensor inputs, at::Tensor targets) {
  BenchWorkload workload;
  workload.module = model.ptr();
  workload.forward = [model](const at::Tensor& x) mutable { return model->forward(x); };
  workload.inputs = std::move(inputs);
  workload.targets = std::move(targets);
  return workload;
}

// Wrap(), with each Linear of the Sequential a full_shard unit.
BenchWorkload WrapSequential(nn::Sequential net, at::Tensor inputs, at::Tensor targets) {
  BenchWorkload workload = Wrap(net, std::move(inputs), std::move(targets));
  for (const std::shared_ptr<nn::Module>& child : net->children()) {
    if (!child->parameters().empty()) workload.units.push_back(child);
  }
  workload.sharded_forward = [net](FullShard& shard, const at::Tensor& x) mutable {
    return shard.ForwardSequential(*net, x);
  };
  return workload;
}

}  // namespace

absl::StatusOr<BenchWorkload> MakeBenchWorkload(const std::string& name) {
  const at::Tensor classes = torch::randint(0, 10, {64});
  if (name == "mlp") {
    return WrapSequential(nn::Sequential(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024),
                                         nn::ReLU(), nn::Linear(1024, 10)),
                          torch::randn({64, 784}), classes);
  }
  if (name == "conv" || name == "conv_bn") {
    const bool bn = name == "conv_bn";
    nn::Sequential net;
    net->push_back(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)));
    if (bn) net->push_back(nn::BatchNorm2d(32));
    net->push_back(nn::ReLU());
    net->push_back(nn::MaxPool2d(2));
    net->push_back(nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
    if (bn) net->push_back(nn::BatchNorm2d(64));
    net->push_back(nn::ReLU());
    net->push_back(nn::MaxPool2d(2));
    net->push_back(nn::Flatten());
    net->push_back(nn::Linear(64 * 7 * 7, 128));
    net->push_back(nn::ReLU());
    net->push_back(nn::Linear(128, 10));
    return Wrap(net, torch::randn({64, 1, 28, 28}), classes);
  }
  if (name == "resnet18") {
    return Wrap(ResNet18(), torch::randn({16, 3, 32, 32}), torch::randint(0, 10, {16}));
  }
  if (name == "gpt") {
    constexpr int64_t kBatch = 8;
    Gpt gpt;
    BenchWorkload workload = Wrap(gpt, torch::randint(0, kGptVocab, {kBatch, kGptSequence}),
                                  torch::randint(0, kGptVocab, {kBatch * kGptSequence}));
    workload.units.push_back(gpt.ptr());
    for (const nn::TransformerEncoderLayer& layer : gpt->layers)
      workload.units.push_back(layer.ptr());
    workload.sharded_forward = [gpt](FullShard& shard, const at::Tensor& x) mutable {
      return gpt->ShardedForward(shard, x);
    };
    return workload;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown workload '", name, "' (mlp, conv, conv_bn, resnet18 or gpt)"));
}

}  // namespace ddpspawn
