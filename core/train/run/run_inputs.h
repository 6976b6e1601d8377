// The inputs of a run: its data and its model, loaded as the options name them (by the checks
// before the launch and by the command in each rank).
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_INPUTS_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_INPUTS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/module.h"
#include "core/train/data/dataset.h"
#include "core/train/run/run_options.h"

namespace ddpspawn {

// Loads `path` (CSV, or .npy features with the .npy `labels`); `what` names the option ("train",
// "val", "data") in errors.
//
// The built-in MLP's task follows from its output layer, not from whether every label happens to be
// an integer (one label of 3.5 in a file of class indices must not quietly turn a classifier into a
// regressor):
// - k > 1 labels per sample (a .npy of shape (n, k)): regression onto k outputs;
// - one label per sample and several outputs: classification, so every label must be an integer
//   (1.0 counts; 3.5 does not, and the error names the file and row); the labels become int64;
// - one label per sample and one output: regression; the labels become float32.
// A TorchScript model gets the labels as the file holds them (int64 when every one is integral,
// else float32) and decides itself.
absl::StatusOr<Dataset> LoadData(const RunConfig& config, const std::string& what,
                                 const std::string& path, const std::string& labels);

// The data must fit the built-in MLP: inputs, and class labels within the outputs (or as many label
// columns as outputs, for regression).
absl::Status CheckDataFitsMlp(const RunConfig& config, LightningModule& mlp, const Dataset& sample);

// The model config.model names: the built-in MLP (a classifier when `sample`'s labels are int64,
// checked by CheckDataFitsMlp against `sample`), or a TorchScript file.
absl::StatusOr<std::shared_ptr<LightningModule>> LoadModel(const RunConfig& config,
                                                           const Dataset& sample);

// The dataset a command works on.
absl::StatusOr<Dataset> PrimaryData(const RunConfig& c);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_INPUTS_H_
