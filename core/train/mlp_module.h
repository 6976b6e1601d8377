// The built-in model: a multilayer perceptron ("mlp:64,128,10" = 64 inputs, one
// hidden layer of 128 with ReLU, 10 outputs). Integer labels make it a
// classifier (cross-entropy; reports loss and accuracy); float labels a
// regressor (mean squared error).
#ifndef DDPSPAWN_CORE_TRAIN_MLP_MODULE_H_
#define DDPSPAWN_CORE_TRAIN_MLP_MODULE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/module.h"

namespace ddpspawn {

// `spec` is "mlp:IN,HIDDEN...,OUT"; `classifier` picks the loss.
absl::StatusOr<std::shared_ptr<LightningModule>> MakeMlpModule(const std::string& spec,
                                                               bool classifier,
                                                               const OptimizerConfig& optimizer);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_MLP_MODULE_H_
