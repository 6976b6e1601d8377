// What the C++ examples train on: synthetic 8x8 digits (ten classes, each a fixed random pattern
// plus noise) and a small CNN for them, with its accuracy on held-out digits.
#ifndef DDPSPAWN_EXAMPLES_CPP_DIGITS_H_
#define DDPSPAWN_EXAMPLES_CPP_DIGITS_H_

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <string>

// A sample is its class's pattern plus noise drawn from `seed`.
class SyntheticDigits : public torch::data::datasets::Dataset<SyntheticDigits> {
 public:
  SyntheticDigits(int64_t size, uint64_t seed) {
    at::Generator patterns = at::detail::createCPUGenerator(2024);
    at::Generator noise = at::detail::createCPUGenerator(seed);
    labels_ = torch::randint(10, {size}, noise, torch::kLong);
    images_ = torch::randn({10, 1, 8, 8}, patterns).index_select(0, labels_) +
              2.0 * torch::randn({size, 1, 8, 8}, noise);
  }
  torch::data::Example<> get(size_t i) override {
    return {images_[static_cast<int64_t>(i)], labels_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return labels_.size(0); }
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  torch::Tensor images_, labels_;
};

struct DigitsNetImpl : torch::nn::Module {
  torch::nn::Conv2d conv{
      register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))};
  torch::nn::BatchNorm2d norm{register_module("norm", torch::nn::BatchNorm2d(8))};
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(8 * 4 * 4, 10))};
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(norm(conv(x))), 2);
    return torch::log_softmax(fc(x.flatten(1)), 1);
  }
};
TORCH_MODULE(DigitsNet);

// "accuracy A% on 512 held-out digits" of `net`, in evaluation mode.
inline std::string TestAccuracy(DigitsNetImpl& net) {
  torch::NoGradGuard no_grad;
  net.eval();
  SyntheticDigits test(512, /*seed=*/2);
  const torch::Tensor predicted = net.forward(test.images()).argmax(1);
  const double accuracy = predicted.eq(test.labels()).to(torch::kDouble).mean().item<double>();
  char text[64];
  std::snprintf(text, sizeof(text), "accuracy %.1f%% on 512 held-out digits", 100 * accuracy);
  return text;
}

#endif  // DDPSPAWN_EXAMPLES_CPP_DIGITS_H_
