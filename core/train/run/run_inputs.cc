// Loading a run's data and model (see run_inputs.h).
#include "core/train/run/run_inputs.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/train/models/mlp_module.h"
#include "core/train/models/torchscript_module.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

bool IsNpy(const std::string& path) { return absl::EndsWith(path, ".npy"); }

absl::StatusOr<Dataset> LoadFile(const std::string& what, const std::string& path,
                                 const std::string& labels, int label_column,
                                 LabelType label_type) {
  if (IsNpy(path)) {
    if (labels.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, " is a .npy file: also give ", what, "_labels"));
    }
    return LoadNpyDataset(path, labels, label_type);
  }
  CsvOptions options;
  options.label_column = label_column;
  options.label_type = label_type;
  return LoadCsvDataset(path, options);
}

}  // namespace

absl::StatusOr<Dataset> LoadData(const RunConfig& config, const std::string& what,
                                 const std::string& path, const std::string& labels) {
  absl::StatusOr<Dataset> data =
      LoadFile(what, path, labels, config.label_column, LabelType::kAuto);
  if (!data.ok() || !absl::StartsWith(config.model, "mlp:")) return data;
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseMlpSpec(config.model));
  const int64_t outputs = sizes.back();
  const bool one_label = data->labels.dim() == 1 || data->labels.size(1) == 1;
  if (!one_label || outputs == 1) {
    data->labels = data->labels.to(at::kFloat);
    return data;
  }
  if (data->labels.scalar_type() == at::kLong) return data;
  // Loaded again as class indices: that converts integral float labels, or names the first label
  // that is not an integer.
  absl::StatusOr<Dataset> classes =
      LoadFile(what, path, labels, config.label_column, LabelType::kInt64);
  if (classes.ok()) return classes;
  return absl::InvalidArgumentError(absl::StrCat(
      "the model '", config.model, "' has ", outputs,
      " outputs and there is one label per sample, so it is a classifier and its labels must be "
      "integer class indices (for regression, give it one output): ",
      classes.status().message()));
}

absl::Status CheckDataFitsMlp(const RunConfig& config, LightningModule& mlp,
                              const Dataset& sample) {
  const bool classifier = sample.labels.scalar_type() == at::kLong;
  const int64_t features = sample.features[0].numel();
  std::vector<at::Tensor> params = mlp.parameters();
  const int64_t inputs = params.front().size(1), outputs = params[params.size() - 2].size(0);
  if (features != inputs) {
    return absl::InvalidArgumentError(absl::StrCat(sample.source, " has ", features,
                                                   " features per sample; the model '",
                                                   config.model, "' takes ", inputs));
  }
  const int64_t label_columns = sample.labels.dim() == 2 ? sample.labels.size(1) : 1;
  if (!classifier && label_columns != outputs) {
    return absl::InvalidArgumentError(absl::StrCat(sample.source, " has ", label_columns,
                                                   " labels per sample; the model '", config.model,
                                                   "' gives ", outputs));
  }
  if (classifier &&
      (sample.labels.min().item<int64_t>() < 0 || sample.labels.max().item<int64_t>() >= outputs)) {
    return absl::InvalidArgumentError(absl::StrCat(sample.source, " has class labels outside [0, ",
                                                   outputs, ") for the model '", config.model,
                                                   "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<LightningModule>> LoadModel(const RunConfig& config,
                                                           const Dataset& sample) {
  if (absl::StartsWith(config.model, "mlp:")) {
    const bool classifier = sample.labels.scalar_type() == at::kLong;
    absl::StatusOr<std::shared_ptr<LightningModule>> mlp =
        MakeMlpModule(config.model, classifier, config.optimizer);
    if (!mlp.ok()) return mlp.status();
    RETURN_IF_ERROR(CheckDataFitsMlp(config, **mlp, sample));
    return mlp;
  }
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> script =
      TorchScriptModule::Load(config.model, config.optimizer);
  if (!script.ok()) return script.status();
  return std::shared_ptr<LightningModule>(*std::move(script));
}

absl::StatusOr<Dataset> PrimaryData(const RunConfig& c) {
  if (c.command == Command::kFit) return LoadData(c, "train", c.train, c.train_labels);
  return LoadData(c, "data", c.data, c.data_labels);
}

}  // namespace ddpspawn
