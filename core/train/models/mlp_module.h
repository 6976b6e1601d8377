// The built-in model: a multilayer perceptron ("mlp:64,128,10" = 64 inputs, one hidden layer of 128
// with ReLU, 10 outputs). A classifier (cross-entropy; reports loss and accuracy) or a regressor
// (mean squared error); run_inputs.cc picks which from the outputs and the labels' shape, and gives
// a classifier int64 labels.
#ifndef DDPSPAWN_CORE_TRAIN_MODELS_MLP_MODULE_H_
#define DDPSPAWN_CORE_TRAIN_MODELS_MLP_MODULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/module.h"

namespace ddpspawn {

// The layer sizes of "mlp:IN,HIDDEN...,OUT" (at least two, each >= 1); InvalidArgument naming the
// spec otherwise.
absl::StatusOr<std::vector<int64_t>> ParseMlpSpec(const std::string& spec);

// `spec` is "mlp:IN,HIDDEN...,OUT"; `classifier` picks the loss.
absl::StatusOr<std::shared_ptr<LightningModule>> MakeMlpModule(const std::string& spec,
                                                               bool classifier,
                                                               const OptimizerConfig& optimizer);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_MODELS_MLP_MODULE_H_
