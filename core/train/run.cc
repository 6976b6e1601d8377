// Run options: parsing, checking, and running a command in a rank (see run.h).
#include "core/train/run.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <functional>
#include <map>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/model/checkpoint.h"
#include "core/train/mlp_module.h"
#include "core/train/torchscript_module.h"
#include "core/util/files.h"
#include "core/util/output_dir.h"

namespace ddpspawn {
namespace {

using Setter = std::function<absl::Status(RunConfig&, const std::string&)>;

absl::Status Bad(const std::string& key, const std::string& value, const std::string& expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("option ", key, "='", value, "': expected ", expected));
}

template <typename T>
Setter Int(T RunConfig::*field, int64_t minimum) {
  return [field, minimum](RunConfig& c, const std::string& v) -> absl::Status {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(v, &parsed) || parsed < minimum) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected an integer >= ", minimum, ", got '", v, "'"));
    }
    c.*field = static_cast<T>(parsed);
    return absl::OkStatus();
  };
}

Setter Text(std::string RunConfig::*field) {
  return [field](RunConfig& c, const std::string& v) {
    c.*field = v;
    return absl::OkStatus();
  };
}

absl::StatusOr<bool> ParseBool(const std::string& v) {
  std::string lower = absl::AsciiStrToLower(v);
  if (lower == "1" || lower == "true" || lower == "yes" || lower.empty()) return true;
  if (lower == "0" || lower == "false" || lower == "no") return false;
  return absl::InvalidArgumentError(absl::StrCat("expected true or false, got '", v, "'"));
}

// A setter on a nested field, for the trainer's and the optimizer's options.
template <typename Get>
Setter Number(Get get, double minimum) {
  return [get, minimum](RunConfig& c, const std::string& v) -> absl::Status {
    double parsed = 0;
    if (!absl::SimpleAtod(v, &parsed) || !(parsed >= minimum)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a number >= ", minimum, ", got '", v, "'"));
    }
    get(c) = parsed;
    return absl::OkStatus();
  };
}

template <typename Get>
Setter Integer(Get get, int64_t minimum) {
  return [get, minimum](RunConfig& c, const std::string& v) -> absl::Status {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(v, &parsed) || parsed < minimum) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected an integer >= ", minimum, ", got '", v, "'"));
    }
    get(c) = parsed;
    return absl::OkStatus();
  };
}

template <typename Get>
Setter Flag(Get get) {
  return [get](RunConfig& c, const std::string& v) -> absl::Status {
    absl::StatusOr<bool> parsed = ParseBool(v);
    if (!parsed.ok()) return parsed.status();
    get(c) = *parsed;
    return absl::OkStatus();
  };
}

const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"model", Text(&RunConfig::model)},
      {"train", Text(&RunConfig::train)},
      {"train_labels", Text(&RunConfig::train_labels)},
      {"val", Text(&RunConfig::val)},
      {"val_labels", Text(&RunConfig::val_labels)},
      {"data", Text(&RunConfig::data)},
      {"data_labels", Text(&RunConfig::data_labels)},
      {"label_column", Integer([](RunConfig& c) -> int& { return c.label_column; }, INT32_MIN)},
      {"checkpoint", Text(&RunConfig::checkpoint)},
      {"max_epochs", Integer([](RunConfig& c) -> int64_t& { return c.trainer.max_epochs; }, 0)},
      {"max_steps", Integer([](RunConfig& c) -> int64_t& { return c.trainer.max_steps; }, -1)},
      {"batch_size", Integer([](RunConfig& c) -> int64_t& { return c.trainer.batch_size; }, 1)},
      {"accumulate_grad_batches",
       Integer([](RunConfig& c) -> int& { return c.trainer.accumulate_grad_batches; }, 1)},
      {"gradient_clip_val",
       Number([](RunConfig& c) -> double& { return c.trainer.gradient_clip_val; }, 0)},
      {"check_val_every_n_epoch",
       Integer([](RunConfig& c) -> int& { return c.trainer.check_val_every_n_epoch; }, 0)},
      {"seed", Integer([](RunConfig& c) -> uint64_t& { return c.trainer.seed; }, 0)},
      {"shuffle", Flag([](RunConfig& c) -> bool& { return c.trainer.shuffle; })},
      {"drop_last", Flag([](RunConfig& c) -> bool& { return c.trainer.drop_last; })},
      {"default_root_dir",
       [](RunConfig& c, const std::string& v) {
         c.trainer.default_root_dir = v;
         return absl::OkStatus();
       }},
      {"resume_from",
       [](RunConfig& c, const std::string& v) {
         c.trainer.resume_from = v;
         return absl::OkStatus();
       }},
      {"num_threads", Integer([](RunConfig& c) -> int& { return c.trainer.num_threads; }, 0)},
      {"log_every_n_steps",
       Integer([](RunConfig& c) -> int& { return c.trainer.log_every_n_steps; }, 0)},
      {"progress", Flag([](RunConfig& c) -> bool& { return c.trainer.enable_progress; })},
      {"optimizer",
       [](RunConfig& c, const std::string& v) -> absl::Status {
         if (v != "sgd" && v != "adam" && v != "adamw")
           return Bad("optimizer", v, "sgd, adam or adamw");
         c.optimizer.name = v;
         return absl::OkStatus();
       }},
      {"lr", Number([](RunConfig& c) -> double& { return c.optimizer.lr; }, 1e-12)},
      {"momentum", Number([](RunConfig& c) -> double& { return c.optimizer.momentum; }, 0)},
      {"weight_decay", Number([](RunConfig& c) -> double& { return c.optimizer.weight_decay; }, 0)},
      {"step_lr_every",
       Integer([](RunConfig& c) -> int64_t& { return c.optimizer.step_lr_every; }, 0)},
      {"step_lr_gamma",
       Number([](RunConfig& c) -> double& { return c.optimizer.step_lr_gamma; }, 0)},
      {"nproc_per_node", Int(&RunConfig::nproc_per_node, 1)},
      {"accelerator",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "cpu" && v != "cuda" && v != "gpu")
                                                      return Bad("accelerator", v, "cpu or cuda");
                                                    c.accelerator = v == "gpu" ? "cuda" : v;
                                                    return absl::OkStatus();
                                                  }},
      {"devices", Text(&RunConfig::devices)},
      {"process_group_backend",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "gloo" && v != "nccl")
                                                      return Bad("process_group_backend", v,
                                                                 "gloo or nccl");
                                                    c.process_group_backend = v;
                                                    return absl::OkStatus();
                                                  }},
      {"nnodes", Int(&RunConfig::nnodes, 1)},
      {"node_rank", Int(&RunConfig::node_rank, 0)},
      {"master_addr", Text(&RunConfig::master_addr)},
      {"master_port", Int(&RunConfig::master_port, 0)},
      {"start_method",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "spawn" && v != "fork")
                                                      return Bad("start_method", v,
                                                                 "spawn or fork");
                                                    c.start_method = v;
                                                    return absl::OkStatus();
                                                  }},
      {"timeout", Number([](RunConfig& c) -> double& { return c.timeout_s; }, 0)},
      {"precision", Text(&RunConfig::precision)},
      {"ddp_comm_hook", Text(&RunConfig::ddp_comm_hook)},
      {"find_unused_parameters",
       Flag([](RunConfig& c) -> bool& { return c.find_unused_parameters; })},
      {"gradient_as_bucket_view",
       Flag([](RunConfig& c) -> bool& { return c.gradient_as_bucket_view; })},
  };
  return *setters;
}

// Lightning's devices: "N" devices (cuda:0..N-1, or N CPU ranks) or a list of
// CUDA indices ("0,2"). Sets nproc_per_node and device_indices.
absl::Status ResolveDevices(RunConfig& config) {
  if (config.devices.empty()) {
    config.device_indices.resize(config.nproc_per_node);
    std::iota(config.device_indices.begin(), config.device_indices.end(), 0);
    return absl::OkStatus();
  }
  std::vector<int> indices;
  const bool list = absl::StrContains(config.devices, ',');
  for (absl::string_view part : absl::StrSplit(config.devices, ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &value) || value < 0 ||
        (!list && value == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("option devices: '", config.devices,
                       "' is neither a device count (2) nor a list of CUDA indices (0,2)"));
    }
    indices.push_back(value);
  }
  if (list && config.accelerator != "cuda") {
    return absl::InvalidArgumentError(
        "option devices: a list of device indices needs --accelerator cuda");
  }
  if (!list) {
    const int count = indices[0];
    indices.resize(count);
    std::iota(indices.begin(), indices.end(), 0);
  }
  const int count = static_cast<int>(indices.size());
  if (config.nproc_per_node != 1 && config.nproc_per_node != count) {
    return absl::InvalidArgumentError(absl::StrCat("option devices gives ", count,
                                                   " devices but nproc_per_node is ",
                                                   config.nproc_per_node, "; give one of them"));
  }
  config.nproc_per_node = count;
  config.device_indices = std::move(indices);
  return absl::OkStatus();
}

bool IsNpy(const std::string& path) { return absl::EndsWith(path, ".npy"); }

absl::StatusOr<Dataset> LoadData(const std::string& what, const std::string& path,
                                 const std::string& labels, int label_column) {
  if (IsNpy(path)) {
    if (labels.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, " is a .npy file: also give ", what, "_labels"));
    }
    return LoadNpyDataset(path, labels);
  }
  CsvOptions options;
  options.label_column = label_column;
  return LoadCsvDataset(path, options);
}

absl::StatusOr<std::shared_ptr<LightningModule>> LoadModel(const RunConfig& config,
                                                           const Dataset& sample) {
  if (absl::StartsWith(config.model, "mlp:")) {
    const bool classifier = sample.labels.scalar_type() == at::kLong;
    absl::StatusOr<std::shared_ptr<LightningModule>> mlp =
        MakeMlpModule(config.model, classifier, config.optimizer);
    if (!mlp.ok()) return mlp.status();
    // The data must fit the model: inputs, and class labels within the outputs.
    const int64_t features = sample.features[0].numel();
    std::vector<at::Tensor> params = (*mlp)->parameters();
    const int64_t inputs = params.front().size(1), outputs = params[params.size() - 2].size(0);
    if (features != inputs) {
      return absl::InvalidArgumentError(absl::StrCat(sample.source, " has ", features,
                                                     " features per sample; the model '",
                                                     config.model, "' takes ", inputs));
    }
    if (classifier && (sample.labels.min().item<int64_t>() < 0 ||
                       sample.labels.max().item<int64_t>() >= outputs)) {
      return absl::InvalidArgumentError(absl::StrCat(sample.source,
                                                     " has class labels outside [0, ", outputs,
                                                     ") for the model '", config.model, "'"));
    }
    return mlp;
  }
  absl::StatusOr<std::shared_ptr<TorchScriptModule>> script =
      TorchScriptModule::Load(config.model, config.optimizer);
  if (!script.ok()) return script.status();
  return std::shared_ptr<LightningModule>(*std::move(script));
}

absl::Status WritePredictions(const at::Tensor& predictions, const std::string& path) {
  at::Tensor rows = predictions.reshape({predictions.size(0), -1}).to(at::kDouble);
  std::string text;
  auto a = rows.accessor<double, 2>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    for (int64_t j = 0; j < rows.size(1); ++j) {
      absl::StrAppendFormat(&text, "%s%.17g", j ? "," : "", a[i][j]);
    }
    text += "\n";
  }
  return WriteFileAtomically(path, text, /*durable=*/false, /*mode=*/0644);
}

// Runs the step the command needs on the first two samples, so that a model
// that lacks it, or cannot digest this data (shapes, label dtype), fails here
// with the file's name rather than in every rank. One intra-op thread, so no
// OpenMP team exists when ranks are forked afterwards.
absl::Status DryRun(const RunConfig& config, LightningModule& module, const Dataset& data) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  c10::NoGradGuard no_grad;
  const int64_t n = std::min<int64_t>(2, data.size());
  Batch batch = {data.features.narrow(0, 0, n), data.labels.narrow(0, 0, n)};
  absl::Status status;
  try {
    module.SetTraining(config.command == "fit");
    if (config.command == "fit") {
      status = module.TrainingStep(batch, 0).status();
    } else if (config.command == "predict") {
      status = module.PredictStep(batch, 0).status();
    } else if (config.command == "test") {
      status = module.TestStep(batch, 0).status();
    } else {
      status = module.ValidationStep(batch, 0).status();
    }
  } catch (const std::exception& e) {
    status = absl::InvalidArgumentError(e.what());
  }
  at::set_num_threads(threads);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("the model ", config.model, " cannot run ",
                                                 config.command, " on ", data.source, ": ",
                                                 status.message()));
}

// The dataset a command works on.
absl::StatusOr<Dataset> PrimaryData(const RunConfig& c) {
  if (c.command == "fit") return LoadData("train", c.train, c.train_labels, c.label_column);
  return LoadData("data", c.data, c.data_labels, c.label_column);
}

}  // namespace

absl::StatusOr<RunConfig> ParseRunConfig(const std::string& command, const RunOptions& options) {
  RunConfig config;
  if (command != "fit" && command != "validate" && command != "test" && command != "predict") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command '", command, "'; expected fit, validate, test or predict"));
  }
  config.command = command;
  for (const auto& [raw_key, value] : options) {
    std::string key = raw_key;
    std::replace(key.begin(), key.end(), '-', '_');
    auto setter = Setters().find(key);
    if (setter == Setters().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", raw_key, "' (see --help for the options)"));
    }
    if (absl::Status s = setter->second(config, value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("option ", raw_key, ": ", s.message()));
    }
  }
  if (absl::Status s = ResolveDevices(config); !s.ok()) return s;
  if (config.model.empty()) return absl::InvalidArgumentError("option model is required");
  if (command == "fit" && config.train.empty()) {
    return absl::InvalidArgumentError("fit needs option train (a CSV or .npy file)");
  }
  if (command != "fit" && config.data.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(command, " needs option data"));
  }
  if (config.nnodes != 1) {
    return absl::UnimplementedError(
        "nnodes > 1 is not supported yet: start each node's ranks with torchrun or SLURM");
  }
  return config;
}

absl::Status CheckRun(const RunConfig& config) {
  absl::StatusOr<Dataset> data = PrimaryData(config);
  if (!data.ok()) return data.status();
  if (data->size() < config.nproc_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(data->source, " has ", data->size(), " samples, fewer than the ",
                     config.nproc_per_node, " ranks (nproc_per_node)"));
  }
  if (!config.val.empty()) {
    absl::StatusOr<Dataset> val =
        LoadData("val", config.val, config.val_labels, config.label_column);
    if (!val.ok()) return val.status();
  }
  if (absl::Status s = MakePrecisionPlugin(config.precision).status(); !s.ok()) return s;
  if (absl::Status s = MakeCommHookByName(config.ddp_comm_hook).status(); !s.ok()) return s;
  for (const std::string* path : {&config.checkpoint, &config.trainer.resume_from}) {
    if (!path->empty() && !std::filesystem::exists(*path)) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", *path, " does not exist"));
    }
  }
  absl::StatusOr<std::shared_ptr<LightningModule>> module = LoadModel(config, *data);
  if (!module.ok()) return module.status();
  // Both are verified (checksum, tensor names and shapes) before any rank
  // starts.
  for (const std::string* path : {&config.trainer.resume_from, &config.checkpoint}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> bytes = ReadWholeFile(*path);
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = RestoreCheckpoint(*bytes, **module, nullptr, nullptr); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", *path, ": ", s.message()));
    }
  }
  return DryRun(config, **module, *data);
}

StrategyOptions StrategyOptionsFor(const RunConfig& config) {
  StrategyOptions options;
  options.accelerator = config.accelerator;
  options.parallel_devices.clear();
  for (int index : config.device_indices) {
    options.parallel_devices.push_back(
        config.accelerator == "cuda" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index))
                                     : c10::Device(c10::kCPU));
  }
  options.process_group_backend = config.process_group_backend;
  options.start_method = config.start_method;
  if (config.timeout_s > 0) options.launch_timeout = absl::Seconds(config.timeout_s);
  options.ddp_comm_hook = config.ddp_comm_hook;
  options.ddp.reducer.find_unused_parameters = config.find_unused_parameters;
  options.ddp.reducer.gradient_as_bucket_view = config.gradient_as_bucket_view;
  absl::StatusOr<std::shared_ptr<PrecisionPlugin>> precision =
      MakePrecisionPlugin(config.precision);
  if (precision.ok()) options.precision_plugin = *precision;
  return options;
}

absl::StatusOr<std::string> RunCommand(const RunConfig& config, DDPSpawnStrategy& strategy) {
  absl::StatusOr<Dataset> data = PrimaryData(config);
  if (!data.ok()) return data.status();
  // The model's initial weights come from the seed (DDP then gives every rank
  // rank 0's).
  at::manual_seed(config.trainer.seed);
  absl::StatusOr<std::shared_ptr<LightningModule>> module = LoadModel(config, *data);
  if (!module.ok()) return module.status();
  if (!config.checkpoint.empty()) {
    absl::StatusOr<std::string> bytes = strategy.LoadCheckpoint(config.checkpoint);
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = RestoreCheckpoint(*bytes, **module, nullptr, nullptr); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", config.checkpoint, ": ", s.message()));
    }
  }
  // Rank 0 writes every output (and is the rank that reports a bad directory).
  if (strategy.is_global_zero()) {
    if (absl::Status s = PrepareOutputDirectory(config.trainer.default_root_dir); !s.ok()) {
      return s;
    }
  }
  Trainer trainer(strategy, config.trainer);
  if (config.command == "fit") {
    std::optional<Dataset> val;
    if (!config.val.empty()) {
      absl::StatusOr<Dataset> loaded =
          LoadData("val", config.val, config.val_labels, config.label_column);
      if (!loaded.ok()) return loaded.status();
      val = *std::move(loaded);
    }
    absl::StatusOr<FitResult> result = trainer.Fit(*module, *data, val ? &*val : nullptr);
    if (!result.ok()) return result.status();
    return result->Encode();
  }
  if (config.command == "predict") {
    absl::StatusOr<at::Tensor> predictions = trainer.Predict(*module, *data);
    if (!predictions.ok()) return predictions.status();
    if (!strategy.is_global_zero()) return std::string();
    const std::string path = config.trainer.default_root_dir + "/predictions.csv";
    if (absl::Status s = WritePredictions(*predictions, path); !s.ok()) return s;
    return absl::StrCat("predictions=", std::filesystem::absolute(path).string(),
                        "\ncount=", predictions->size(0), "\n");
  }
  absl::StatusOr<std::map<std::string, double>> metrics =
      config.command == "test" ? trainer.Test(*module, *data) : trainer.Validate(*module, *data);
  if (!metrics.ok()) return metrics.status();
  std::string text;
  for (const auto& [name, value] : *metrics) {
    absl::StrAppendFormat(&text, "metric.%s=%.17g\n", name, value);
  }
  return text;
}

std::string RunOptionsHelp() {
  return R"(Model and data:
  --model SPEC                mlp:IN,HIDDEN...,OUT (built in) or a TorchScript file whose
                              exported training_step(self, batch: List[Tensor], batch_idx: int)
                              returns the loss (see docs/training.md)
  --train FILE                training data: CSV (label in the last column) or .npy features
  --train-labels FILE         labels .npy, with .npy features
  --val FILE, --val-labels    validation data (fit)
  --data FILE, --data-labels  data for validate, test and predict
  --label-column N            CSV column of the label (default -1: the last)
  --checkpoint FILE           weights to start from (validate, test, predict)
Trainer:
  --max-epochs N (10)  --max-steps N (-1: none)  --batch-size N (32, per rank)
  --accumulate-grad-batches N (1)  --gradient-clip-val X (0: off)
  --check-val-every-n-epoch N (1)  --seed N (0)  --shuffle BOOL (true)  --drop-last BOOL
  --default-root-dir DIR (ddpspawn_logs): metrics.csv, checkpoints/last.ckpt, predictions.csv
  --resume-from FILE  --num-threads N (0: cores / ranks)  --log-every-n-steps N (10)
  --progress BOOL (true)
Optimizer:
  --optimizer sgd|adam|adamw (sgd)  --lr X (0.01)  --momentum X  --weight-decay X
  --step-lr-every N (epochs; 0: constant)  --step-lr-gamma X (0.1)
Distributed (torchrun-style):
  --nproc-per-node N (1)  --nnodes 1  --node-rank 0  --master-addr A  --master-port P
  --start-method spawn|fork (spawn)  --timeout SECONDS (0: none)
  --accelerator cpu|cuda (cpu)  --devices N or CUDA indices 0,2 (sets nproc-per-node)
  --process-group-backend gloo|nccl (by accelerator: nccl on cuda, gloo on cpu)
  --precision 32-true|bf16-mixed|16-mixed (cuda)  --ddp-comm-hook allreduce|fp16|bf16|powersgd
  --find-unused-parameters BOOL  --gradient-as-bucket-view BOOL
)";
}

}  // namespace ddpspawn
