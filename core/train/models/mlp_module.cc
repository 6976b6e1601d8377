// The built-in MLP module (see mlp_module.h).
#include "core/train/models/mlp_module.h"

#include <torch/torch.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/ddp/full_shard.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

class MlpModule : public NnModule {
 public:
  MlpModule(const torch::nn::Sequential& net, bool classifier, OptimizerConfig optimizer)
      : NnModule(net.ptr()), net_(net), classifier_(classifier), optimizer_(std::move(optimizer)) {}

  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, int64_t) override {
    ASSIGN_OR_RETURN(at::Tensor out, Forward(batch[0].flatten(1)));
    return Loss(out, batch[1]);
  }
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch, int64_t) override {
    ASSIGN_OR_RETURN(at::Tensor out, Forward(batch[0].flatten(1)));
    StepMetrics metrics{{"val_loss", Loss(out, batch[1])}};
    if (classifier_) {
      metrics["val_accuracy"] = out.argmax(1).eq(batch[1]).to(at::kFloat).mean();
    }
    return metrics;
  }
  absl::StatusOr<StepMetrics> TestStep(const Batch& batch, int64_t index) override {
    absl::StatusOr<StepMetrics> metrics = ValidationStep(batch, index);
    if (!metrics.ok()) return metrics;
    StepMetrics renamed;  // test_loss, test_accuracy
    for (auto& [name, value] : *metrics) renamed["test" + name.substr(3)] = value;
    return renamed;
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch& batch, int64_t) override {
    ASSIGN_OR_RETURN(at::Tensor out, Forward(batch[0].flatten(1)));
    return classifier_ ? out.argmax(1) : out;
  }
  OptimizerConfig ConfigureOptimizers() override { return optimizer_; }
  // full_shard's units: each Linear layer.
  std::vector<std::shared_ptr<torch::nn::Module>> ShardUnits() override {
    std::vector<std::shared_ptr<torch::nn::Module>> units;
    for (const std::shared_ptr<torch::nn::Module>& child : net_->children()) {
      if (!child->parameters().empty()) units.push_back(child);
    }
    return units;
  }
  void UseFullShard(FullShard* shard) override { full_shard_ = shard; }

 private:
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& x) {
    if (full_shard_ != nullptr) return full_shard_->ForwardSequential(*net_, x);
    return net_->forward(x);
  }
  at::Tensor Loss(const at::Tensor& out, const at::Tensor& labels) {
    if (classifier_) return torch::nn::functional::cross_entropy(out, labels);
    return torch::mse_loss(out.squeeze(-1), labels.to(out.scalar_type()).squeeze(-1));
  }
  torch::nn::Sequential net_;
  bool classifier_;
  OptimizerConfig optimizer_;
  FullShard* full_shard_ = nullptr;  // the strategy's, while it lives
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseMlpSpec(const std::string& spec) {
  if (!absl::StartsWith(spec, "mlp:")) {
    return absl::InvalidArgumentError(absl::StrCat("'", spec, "' is not an mlp:IN,...,OUT spec"));
  }
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(spec.substr(4), ',')) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", spec, "': layer size '", part, "' is not a positive integer"));
    }
    sizes.push_back(size);
  }
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", spec, "' needs at least an input and an output size"));
  }
  return sizes;
}

absl::StatusOr<std::shared_ptr<LightningModule>> MakeMlpModule(const std::string& spec,
                                                               bool classifier,
                                                               const OptimizerConfig& optimizer) {
  ASSIGN_OR_RETURN(std::vector<int64_t> parsed, ParseMlpSpec(spec));
  const std::vector<int64_t>& sizes = parsed;
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    net->push_back(torch::nn::Linear(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) net->push_back(torch::nn::ReLU());
  }
  return std::shared_ptr<LightningModule>(std::make_shared<MlpModule>(net, classifier, optimizer));
}

}  // namespace ddpspawn
