// NnModule: a LightningModule over a torch::nn::Module (see module.h).
#include "core/model/module.h"

#include <torch/nn/module.h>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"

namespace ddpspawn {

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
