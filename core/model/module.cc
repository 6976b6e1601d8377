// NnModule: a LightningModule over a torch::nn::Module (see module.h).
#include "core/model/module.h"

#include <torch/nn/module.h>

#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"
#include "core/util/exception_status.h"

namespace ddpspawn {
namespace {

constexpr NamedValue<Optimizer> kOptimizerNames[] = {
    {"sgd", Optimizer::kSgd},         {"adam", Optimizer::kAdam},
    {"adamw", Optimizer::kAdamW},     {"rmsprop", Optimizer::kRmsprop},
    {"adagrad", Optimizer::kAdagrad},
};

constexpr NamedValue<Optimizer> kOptimizerClassNames[] = {
    {"SGD", Optimizer::kSgd},         {"Adam", Optimizer::kAdam},
    {"AdamW", Optimizer::kAdamW},     {"RMSprop", Optimizer::kRmsprop},
    {"Adagrad", Optimizer::kAdagrad},
};

}  // namespace

absl::string_view OptimizerName(Optimizer optimizer) { return NameOf(kOptimizerNames, optimizer); }

absl::StatusOr<Optimizer> ParseOptimizer(absl::string_view name) {
  return ParseName(kOptimizerNames, "optimizer", name);
}

absl::string_view OptimizerClassName(Optimizer optimizer) {
  return NameOf(kOptimizerClassNames, optimizer);
}

std::vector<at::Tensor> NnModule::parameters() { return network_->parameters(); }

std::vector<at::Tensor> NnModule::buffers() { return network_->buffers(); }

NamedTensors NnModule::named_state() {
  NamedTensors state;
  for (const auto& item : network_->named_parameters())
    state.emplace_back(item.key(), item.value());
  for (const auto& item : network_->named_buffers()) state.emplace_back(item.key(), item.value());
  return state;
}

absl::Status NnModule::To(const c10::Device& device) {
  try {
    network_->to(device);
  } catch (const std::exception& e) {
    return ExceptionStatus(absl::StrCat("moving the model to ", device.str()), e);
  }
  return absl::OkStatus();
}

void NnModule::SetTraining(bool training) { network_->train(training); }

}  // namespace ddpspawn
