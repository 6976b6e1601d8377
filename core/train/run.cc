// Run options: parsing, checking, and running a command in a rank (see run.h).
#include "core/train/run.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/Device.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/env/settings.h"
#include "core/launch/launcher.h"
#include "core/model/checkpoint.h"
#include "core/train/mlp_module.h"
#include "core/train/torchscript_module.h"
#include "core/util/files.h"
#include "core/util/output_dir.h"

namespace ddpspawn {
namespace {

// A setter returns "expected ..." on a bad value; ParseRunConfig names the
// option and the value.
using Setter = std::function<absl::Status(RunConfig&, const std::string&)>;

absl::Status Expected(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("expected ", what));
}

// Whether `value` is representable in T.
template <typename T>
constexpr bool Fits(int64_t value) {
  if constexpr (std::is_signed_v<T>) {
    return value >= std::numeric_limits<T>::min() && value <= std::numeric_limits<T>::max();
  } else {
    return value >= 0 && static_cast<uint64_t>(value) <= std::numeric_limits<T>::max();
  }
}

// An integer option in [kMin, kMax]: parsed into 64 bits and range-checked
// before it is narrowed to its field (so 4294967298 is an error, not 2 in an
// int). `field` is a member pointer or a function returning the field.
template <int64_t kMin, int64_t kMax, typename Field>
Setter Integer(Field field) {
  using T = std::remove_reference_t<std::invoke_result_t<Field, RunConfig&>>;
  static_assert(std::is_integral_v<T> && kMin <= kMax, "an integer field and a range");
  static_assert(Fits<T>(kMin) && Fits<T>(kMax), "the range must fit the field's type");
  return [field](RunConfig& c, const std::string& v) -> absl::Status {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(v, &parsed) || parsed < kMin || parsed > kMax) {
      return Expected(absl::StrCat("an integer in [", kMin, ", ", kMax, "]"));
    }
    std::invoke(field, c) = static_cast<T>(parsed);
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
  return Expected("true or false");
}

// A floating-point option: a finite number >= minimum. SimpleAtod reads "inf",
// "nan" and 1e400 (as inf); no option means any of them.
template <typename Get>
Setter Number(Get get, double minimum) {
  return [get, minimum](RunConfig& c, const std::string& v) -> absl::Status {
    double parsed = 0;
    if (!absl::SimpleAtod(v, &parsed) || !std::isfinite(parsed) || parsed < minimum) {
      return Expected(absl::StrCat("a finite number >= ", minimum));
    }
    get(c) = parsed;
    return absl::OkStatus();
  };
}

// Lightning's max_time: "DD:HH:MM:SS", or seconds.
absl::StatusOr<absl::Duration> ParseMaxTime(const std::string& v) {
  std::vector<std::string> parts = absl::StrSplit(v, ':');
  double seconds = 0;
  if (parts.size() == 4) {
    int64_t fields[4] = {};
    for (int i = 0; i < 4; ++i) {
      if (!absl::SimpleAtoi(parts[i], &fields[i]) || fields[i] < 0 || fields[i] > 100000) {
        return Expected("DD:HH:MM:SS or a number of seconds > 0");
      }
    }
    seconds = static_cast<double>(((fields[0] * 24 + fields[1]) * 60 + fields[2]) * 60 + fields[3]);
  } else if (parts.size() != 1 || !absl::SimpleAtod(v, &seconds) || !std::isfinite(seconds)) {
    return Expected("DD:HH:MM:SS or a number of seconds > 0");
  }
  if (!(seconds > 0)) return Expected("DD:HH:MM:SS or a number of seconds > 0");
  return absl::Seconds(seconds);
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

// The integer options' ranges. Counters (epochs, steps) and the seed take
// their field's whole non-negative range: they are only compared, incremented,
// or (the seed) added to modulo 2^64.
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// A batch larger than a rank's shard is the whole shard; 2^31 - 1 samples is
// more than any shard held in memory, and keeps batch arithmetic far from
// overflow.
constexpr int64_t kMaxBatchSize = kIntMax;
// nnodes x nproc_per_node (at most 2^14 x 2^16 = 2^30) fits the int world
// size.
constexpr int64_t kMaxNodes = 16384;
constexpr int64_t kMaxPort = 65535;  // TCP; 0 picks a free port

// More restarts than anyone waits through; a bound keeps the count an int.
constexpr int64_t kMaxRestarts = 1000;

const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"model", Text(&RunConfig::model)},
      {"train", Text(&RunConfig::train)},
      {"train_labels", Text(&RunConfig::train_labels)},
      {"val", Text(&RunConfig::val)},
      {"val_labels", Text(&RunConfig::val_labels)},
      {"data", Text(&RunConfig::data)},
      {"data_labels", Text(&RunConfig::data_labels)},
      // Any int: the loader checks it against the file's columns.
      {"label_column", Integer<-kIntMax - 1, kIntMax>(&RunConfig::label_column)},
      {"checkpoint", Text(&RunConfig::checkpoint)},
      {"max_epochs",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.trainer.max_epochs; })},
      {"max_steps",
       Integer<-1, kInt64Max>([](RunConfig& c) -> int64_t& { return c.trainer.max_steps; })},
      {"batch_size",
       Integer<1, kMaxBatchSize>([](RunConfig& c) -> int64_t& { return c.trainer.batch_size; })},
      {"accumulate_grad_batches",
       Integer<1, kIntMax>([](RunConfig& c) -> int& { return c.trainer.accumulate_grad_batches; })},
      {"gradient_clip_val",
       Number([](RunConfig& c) -> double& { return c.trainer.gradient_clip_val; }, 0)},
      {"check_val_every_n_epoch",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.trainer.check_val_every_n_epoch; })},
      {"seed", Integer<0, kInt64Max>([](RunConfig& c) -> uint64_t& { return c.trainer.seed; })},
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
      {"num_threads",
       Integer<0, kMaxNumThreads>([](RunConfig& c) -> int& { return c.trainer.num_threads; })},
      {"log_every_n_steps",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.trainer.log_every_n_steps; })},
      {"checkpoint_every_n_steps", Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& {
         return c.trainer.checkpoint_every_n_steps;
       })},
      {"max_restarts", Integer<0, kMaxRestarts>(&RunConfig::max_restarts)},
      {"checkpoint_on_signal",
       [](RunConfig& c, const std::string& v) {
         if (v != "auto" && v != "none" && v != "SIGUSR1" && v != "SIGUSR2") {
           return Expected("auto, none, SIGUSR1 or SIGUSR2");
         }
         c.checkpoint_on_signal = v;
         return absl::OkStatus();
       }},
      {"progress", Flag([](RunConfig& c) -> bool& { return c.trainer.enable_progress; })},
      {"allow_non_finite_loss",
       Flag([](RunConfig& c) -> bool& { return c.trainer.allow_non_finite_loss; })},
      {"optimizer",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "sgd" && v != "adam" && v != "adamw")
                                                      return Expected("sgd, adam or adamw");
                                                    c.optimizer.name = v;
                                                    return absl::OkStatus();
                                                  }},
      {"lr", Number([](RunConfig& c) -> double& { return c.optimizer.lr; }, 1e-12)},
      {"momentum", Number([](RunConfig& c) -> double& { return c.optimizer.momentum; }, 0)},
      {"weight_decay", Number([](RunConfig& c) -> double& { return c.optimizer.weight_decay; }, 0)},
      {"step_lr_every",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.optimizer.step_lr_every; })},
      {"step_lr_gamma",
       Number([](RunConfig& c) -> double& { return c.optimizer.step_lr_gamma; }, 0)},
      {"nproc_per_node", Integer<1, kMaxNprocs>(&RunConfig::nproc_per_node)},
      {"accelerator",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "cpu" && v != "cuda" && v != "gpu")
                                                      return Expected("cpu or cuda");
                                                    c.accelerator = v == "gpu" ? "cuda" : v;
                                                    return absl::OkStatus();
                                                  }},
      {"devices", Text(&RunConfig::devices)},
      {"process_group_backend",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "gloo" && v != "nccl")
                                                      return Expected("gloo or nccl");
                                                    c.process_group_backend = v;
                                                    return absl::OkStatus();
                                                  }},
      {"nnodes", Integer<1, kMaxNodes>(&RunConfig::nnodes)},
      {"node_rank", Integer<0, kMaxNodes - 1>(&RunConfig::node_rank)},
      {"master_addr", Text(&RunConfig::master_addr)},
      {"master_port", Integer<0, kMaxPort>(&RunConfig::master_port)},
      {"start_method",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    if (v != "spawn" && v != "fork")
                                                      return Expected("spawn or fork");
                                                    c.start_method = v;
                                                    return absl::OkStatus();
                                                  }},
      {"timeout", Number([](RunConfig& c) -> double& { return c.timeout_s; }, 1e-3)},
      {"max_time",
       [](RunConfig& c, const std::string& v) -> absl::
                                                  Status {
                                                    absl::StatusOr<absl::Duration> limit =
                                                        ParseMaxTime(v);
                                                    if (!limit.ok()) return limit.status();
                                                    c.trainer.max_time = *limit;
                                                    return absl::OkStatus();
                                                  }},
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
  // A count is at most the launcher's limit; an index must fit c10::DeviceIndex
  // (int8_t), which StrategyOptionsFor narrows it to.
  constexpr int kMaxIndex = std::numeric_limits<c10::DeviceIndex>::max();
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
    if (list ? value > kMaxIndex : value > kMaxNprocs) {
      return absl::InvalidArgumentError(
          absl::StrCat("option devices='", config.devices, "': expected ",
                       list ? absl::StrCat("CUDA indices in [0, ", kMaxIndex, "]")
                            : absl::StrCat("a device count in [1, ", kMaxNprocs, "]")));
    }
    indices.push_back(value);
  }
  if (list && config.accelerator != "cuda") {
    return absl::InvalidArgumentError(
        "option devices: a list of device indices needs --accelerator cuda");
  }
  if (list && indices.size() > static_cast<size_t>(kMaxNprocs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("option devices: expected at most ", kMaxNprocs, " CUDA indices"));
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

// The built-in MLP's task follows from its output layer, not from whether every
// label happens to be an integer (one label of 3.5 in a file of class indices
// must not quietly turn a classifier into a regressor):
// - k > 1 labels per sample (a .npy of shape (n, k)): regression onto k outputs;
// - one label per sample and several outputs: classification, so every label
//   must be an integer (1.0 counts; 3.5 does not, and the error names the file
//   and row); the labels become int64;
// - one label per sample and one output: regression; the labels become float32.
// A TorchScript model gets the labels as the file holds them (int64 when every
// one is integral, else float32) and decides itself.
absl::StatusOr<Dataset> LoadData(const RunConfig& config, const std::string& what,
                                 const std::string& path, const std::string& labels) {
  absl::StatusOr<Dataset> data =
      LoadFile(what, path, labels, config.label_column, LabelType::kAuto);
  if (!data.ok() || !absl::StartsWith(config.model, "mlp:")) return data;
  absl::StatusOr<std::vector<int64_t>> sizes = ParseMlpSpec(config.model);
  if (!sizes.ok()) return sizes.status();
  const int64_t outputs = sizes->back();
  const bool one_label = data->labels.dim() == 1 || data->labels.size(1) == 1;
  if (!one_label || outputs == 1) {
    data->labels = data->labels.to(at::kFloat);
    return data;
  }
  if (data->labels.scalar_type() == at::kLong) return data;
  // Loaded again as class indices: that converts integral float labels, or
  // names the first label that is not an integer.
  absl::StatusOr<Dataset> classes =
      LoadFile(what, path, labels, config.label_column, LabelType::kInt64);
  if (classes.ok()) return classes;
  return absl::InvalidArgumentError(absl::StrCat(
      "the model '", config.model, "' has ", outputs,
      " outputs and there is one label per sample, so it is a classifier and its labels must be "
      "integer class indices (for regression, give it one output): ",
      classes.status().message()));
}

// The data must fit the built-in MLP: inputs, and class labels within the
// outputs (or as many label columns as outputs, for regression).
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
    if (absl::Status s = CheckDataFitsMlp(config, **mlp, sample); !s.ok()) return s;
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
absl::Status DryRun(const RunConfig& config, LightningModule& module, const Dataset& data,
                    const std::string& command) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  c10::NoGradGuard no_grad;
  const int64_t n = std::min<int64_t>(2, data.size());
  Batch batch = {data.features.narrow(0, 0, n), data.labels.narrow(0, 0, n)};
  absl::Status status;
  try {
    module.SetTraining(command == "fit");
    if (command == "fit") {
      status = module.TrainingStep(batch, 0).status();
    } else if (command == "predict") {
      status = module.PredictStep(batch, 0).status();
    } else if (command == "test") {
      status = module.TestStep(batch, 0).status();
    } else {
      status = module.ValidationStep(batch, 0).status();
    }
  } catch (const c10::Error& e) {
    status = absl::InvalidArgumentError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    status = absl::InvalidArgumentError(e.what());
  }
  at::set_num_threads(threads);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("the model ", config.model, " cannot run ",
                                                 command == "fit" ? "training" : command, " on ",
                                                 data.source, ": ", status.message()));
}

// The dataset a command works on.
absl::StatusOr<Dataset> PrimaryData(const RunConfig& c) {
  if (c.command == "fit") return LoadData(c, "train", c.train, c.train_labels);
  return LoadData(c, "data", c.data, c.data_labels);
}

}  // namespace

// Under torchrun, srun or a hand-set WORLD_SIZE this process is one rank of
// that job (DDPSpawnStrategy::Launch joins it): the job's shape comes from
// there. Options that would describe another shape are refused, not ignored.
absl::Status AdoptOuterJob(RunConfig& config, const std::set<std::string>& given) {
  absl::StatusOr<ClusterInfo> outer = DetectClusterEnvironment();
  // A broken environment is reported by Launch(), which reads it again.
  if (!outer.ok() || !CreatesProcessesExternally(*outer)) return absl::OkStatus();
  for (const char* key : {"nnodes", "node_rank", "master_addr", "master_port", "max_restarts"}) {
    if (given.count(key) == 0) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("option ", key, ": this process is rank ", outer->rank, " of a ",
                     ClusterKindName(outer->kind), " job of ", outer->world_size,
                     " processes, which sets the nodes and the rendezvous; leave ", key, " out"));
  }
  if (given.count("nproc_per_node") == 0 && given.count("devices") == 0) {
    config.nproc_per_node = outer->local_world_size;
  }
  config.world_size = outer->world_size;
  return absl::OkStatus();
}

absl::StatusOr<RunConfig> ParseRunConfig(const std::string& command, const RunOptions& options) {
  RunConfig config;
  if (command != "fit" && command != "validate" && command != "test" && command != "predict") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command '", command, "'; expected fit, validate, test or predict"));
  }
  config.command = command;
  std::set<std::string> given;
  for (const auto& [raw_key, value] : options) {
    std::string key = raw_key;
    std::replace(key.begin(), key.end(), '-', '_');
    given.insert(key);
    auto setter = Setters().find(key);
    if (setter == Setters().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", raw_key, "' (see --help for the options)"));
    }
    if (absl::Status s = setter->second(config, value); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("option ", raw_key, "='", value, "': ", s.message()));
    }
  }
  if (absl::Status s = AdoptOuterJob(config, given); !s.ok()) return s;
  if (config.checkpoint_on_signal == "SIGUSR1" ||
      (config.checkpoint_on_signal == "auto" && DetectSlurmJob().has_value())) {
    config.trainer.checkpoint_on_signal = SIGUSR1;
  } else if (config.checkpoint_on_signal == "SIGUSR2") {
    config.trainer.checkpoint_on_signal = SIGUSR2;
  }
  if (absl::Status s = ResolveDevices(config); !s.ok()) return s;
  if (config.world_size == 0) config.world_size = config.nnodes * config.nproc_per_node;
  if (config.model.empty()) return absl::InvalidArgumentError("option model is required");
  if (command == "fit" && config.train.empty()) {
    return absl::InvalidArgumentError("fit needs option train (a CSV or .npy file)");
  }
  if (command != "fit" && config.data.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(command, " needs option data"));
  }
  if (config.node_rank >= config.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("option node_rank=", config.node_rank,
                                                   " is outside [0, nnodes=", config.nnodes, ")"));
  }
  if (config.nnodes == 1 && (!config.master_addr.empty() || config.master_port != 0)) {
    return absl::InvalidArgumentError(
        "master_addr and master_port are for nnodes > 1: the ranks of one node meet privately "
        "(a directory only this user can enter)");
  }
  if (config.nnodes > 1 && config.max_restarts > 0) {
    return absl::UnimplementedError(
        "max_restarts with nnodes > 1 is not supported yet: restart the job's launchers "
        "yourself, with resume_from");
  }
  if (config.max_restarts > 0 && command != "fit") {
    return absl::InvalidArgumentError(
        absl::StrCat("max_restarts is for fit (which writes the checkpoint a restart continues "
                     "from), not ",
                     command));
  }
  if (config.nnodes > 1 && config.master_addr.empty()) {
    return absl::InvalidArgumentError(
        "nnodes > 1 needs master_addr: node 0's address, the same on every node");
  }
  return config;
}

absl::Status CheckRun(const RunConfig& config) {
  absl::StatusOr<Dataset> data = PrimaryData(config);
  if (!data.ok()) return data.status();
  if (data->size() < config.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(data->source, " has ", data->size(),
                                                   " samples, fewer than the ", config.world_size,
                                                   " ranks"));
  }
  std::optional<Dataset> val;
  if (!config.val.empty()) {
    absl::StatusOr<Dataset> loaded = LoadData(config, "val", config.val, config.val_labels);
    if (!loaded.ok()) return loaded.status();
    val = *std::move(loaded);
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
  if (absl::Status s = DryRun(config, **module, *data, config.command); !s.ok()) return s;
  // The validation set must fit the model as well as the training set.
  if (config.command != "fit" || !val.has_value()) return absl::OkStatus();
  if (absl::StartsWith(config.model, "mlp:")) {
    if (absl::Status s = CheckDataFitsMlp(config, **module, *val); !s.ok()) return s;
  }
  return DryRun(config, **module, *val, "validate");
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
  options.timeout = absl::Seconds(config.timeout_s);
  options.num_nodes = config.nnodes;
  options.node_rank = config.node_rank;
  options.master_addr = config.master_addr;
  if (config.master_port != 0) options.master_port = config.master_port;
  options.job_description = absl::StrCat("ddpspawn ", config.command, " model=", config.model);
  // Forked ranks open their data, model and outputs by name: they need none of
  // the caller's descriptors (which would otherwise stay open, e.g. a pipe's
  // write end its reader waits on, for the whole run).
  options.fork_close_descriptors = true;
  options.ddp_comm_hook = config.ddp_comm_hook;
  options.ddp.reducer.find_unused_parameters = config.find_unused_parameters;
  options.ddp.reducer.gradient_as_bucket_view = config.gradient_as_bucket_view;
  absl::StatusOr<std::shared_ptr<PrecisionPlugin>> precision =
      MakePrecisionPlugin(config.precision);
  if (precision.ok()) options.precision_plugin = *precision;
  return options;
}

namespace {

absl::StatusOr<std::string> RunResolvedCommand(const RunConfig& config,
                                               DDPSpawnStrategy& strategy) {
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
      absl::StatusOr<Dataset> loaded = LoadData(config, "val", config.val, config.val_labels);
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

}  // namespace

absl::StatusOr<std::string> RunCommand(const RunConfig& config, DDPSpawnStrategy& strategy) {
  // A restarted job's ranks continue from what its launcher chose.
  if (std::optional<std::string> resume = ReadSetting(Setting::kResumeFrom)) {
    RunConfig resumed = config;
    resumed.trainer.resume_from = *resume;
    return RunResolvedCommand(resumed, strategy);
  }
  // A SLURM job that SLURM requeued (after checkpoint_on_signal stopped it,
  // say) continues from the checkpoint its previous run left.
  std::optional<SlurmJob> slurm = DetectSlurmJob();
  const std::string last = LastCheckpointPath(config.trainer);
  if (config.command == "fit" && config.trainer.resume_from.empty() && slurm.has_value() &&
      slurm->restart_count > 0 && std::filesystem::exists(last)) {
    if (strategy.is_global_zero()) {
      std::fprintf(
          stderr, "ddpspawn: SLURM requeued job %s (SLURM_RESTART_COUNT=%d): continuing from %s\n",
          slurm->job_id.c_str(), slurm->restart_count, std::filesystem::absolute(last).c_str());
    }
    RunConfig resumed = config;
    resumed.trainer.resume_from = last;
    return RunResolvedCommand(resumed, strategy);
  }
  return RunResolvedCommand(config, strategy);
}

namespace {

// When `path` was last written; nullopt when it does not exist.
std::optional<absl::Time> ModifiedAt(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return std::nullopt;
  return absl::TimeFromTimespec(info.st_mtim);
}

}  // namespace

absl::StatusOr<std::string> LaunchWithRestarts(const RunConfig& config, DDPSpawnStrategy& strategy,
                                               const DDPSpawnStrategy::WorkerFn& fn) {
  const absl::Time started = absl::Now();
  const std::string checkpoint = LastCheckpointPath(config.trainer);
  for (int restarts = 0;; ++restarts) {
    absl::StatusOr<std::string> result = strategy.Launch(fn);
    if (result.ok()) {
      if (config.max_restarts == 0) return result;
      return absl::StrCat(*result, "restarts=", restarts, "\n");
    }
    // Only a failed rank is retried: not an interrupt, a timeout of the whole
    // job or a refusal before any rank ran.
    if (restarts >= config.max_restarts || !absl::IsAborted(result.status())) {
      if (restarts == 0) return result;
      return absl::Status(result.status().code(),
                          absl::StrCat(result.status().message(), "\n(after ", restarts,
                                       restarts == 1 ? " restart" : " restarts", ")"));
    }
    // This job's own checkpoint, if it wrote one; else where it started.
    std::optional<absl::Time> written = ModifiedAt(checkpoint);
    const std::string resume = written.has_value() && *written >= started
                                   ? std::filesystem::absolute(checkpoint).string()
                                   : config.trainer.resume_from;
    const std::string why(result.status().message());
    std::fprintf(stderr, "ddpspawn: restart %d of %d: %s\nddpspawn: continuing from %s\n",
                 restarts + 1, config.max_restarts, why.substr(0, why.find('\n')).c_str(),
                 resume.empty() ? "the start (no checkpoint yet)" : resume.c_str());
    std::vector<std::string> env;
    if (!resume.empty())
      env.push_back(absl::StrCat(SettingName(Setting::kResumeFrom), "=", resume));
    strategy.set_worker_env(std::move(env));
  }
}

std::string RunOptionsHelp() {
  return absl::StrCat(R"(Model and data:
  --model SPEC                mlp:IN,HIDDEN...,OUT (built in: several outputs classify, with
                              integer labels; one output per label column regresses) or a
                              TorchScript file whose exported training_step(self,
                              batch: List[Tensor], batch_idx: int) returns the loss
                              (see docs/training.md)
  --train FILE                training data: CSV (label in the last column) or .npy features;
                              NaN, infinite or out-of-float32 values are errors
  --train-labels FILE         labels .npy, with .npy features
  --val FILE, --val-labels    validation data (fit)
  --data FILE, --data-labels  data for validate, test and predict
  --label-column N            CSV column of the label (default -1: the last)
  --checkpoint FILE           weights to start from (validate, test, predict)
Trainer:
  --max-epochs N (10)  --max-steps N (-1: none)  --batch-size N (32, per rank; <= 2^31-1)
  --accumulate-grad-batches N (1)  --gradient-clip-val X (0: off)
  --check-val-every-n-epoch N (1)  --seed N (0)  --shuffle BOOL (true)  --drop-last BOOL
  --default-root-dir DIR (ddpspawn_logs): metrics.csv, checkpoints/last.ckpt, predictions.csv
  --resume-from FILE  --num-threads N (0: cores / ranks; <= )",
                      kMaxNumThreads, R"()  --log-every-n-steps N (10)
  --progress BOOL (true)  --checkpoint-every-n-steps K (0: at each epoch's end only)
  --checkpoint-on-signal auto|none|SIGUSR1|SIGUSR2 (auto: SIGUSR1 in a SLURM job): fit saves
      its checkpoint and stops on that signal (stopped_by=SIGUSR1); a job SLURM requeues
      (SLURM_RESTART_COUNT > 0) continues from that checkpoint
  --max-time DD:HH:MM:SS or SECONDS (none): as Lightning's, fit stops after the first
                              optimizer step past it on any rank, saves its checkpoint
                              (resumable mid-epoch) and succeeds
  --allow-non-finite-loss BOOL (false: a nan/inf training loss stops fit with an error,
                              keeping the last good checkpoint)
Optimizer:
  --optimizer sgd|adam|adamw (sgd)  --lr X (0.01)  --momentum X  --weight-decay X
  --step-lr-every N (epochs; 0: constant)  --step-lr-gamma X (0.1)
Distributed (torchrun-style):
  --nproc-per-node N (1..)",
                      kMaxNprocs, R"(; 1)  --start-method spawn|fork (spawn)
  --max-restarts N (0): when a rank fails, start the ranks again, up to N times, continuing
      from this job's last checkpoint (fit; with --checkpoint-every-n-steps K it is at most K
      steps old, and the weights end as without the failure)
  --nnodes N (1)  --node-rank R (0)  --master-addr A  --master-port P (29500): for N > 1, run
      ddpspawn on every node with its own R and node 0's address A; node 0's launcher serves
      the rendezvous on port P (all interfaces). Under torchrun or srun leave them out.
  --timeout SECONDS (1800: each collective's limit; past it the job fails naming the ranks
                     that never arrived and what every rank was last doing)
  --accelerator cpu|cuda (cpu)  --devices N or CUDA indices 0,2 (sets nproc-per-node)
  --process-group-backend gloo|nccl (by accelerator: nccl on cuda, gloo on cpu)
  --precision 32-true|bf16-mixed|16-mixed (cuda)  --ddp-comm-hook allreduce|fp16|bf16|powersgd
  --find-unused-parameters BOOL  --gradient-as-bucket-view BOOL
Numbers: integers out of an option's range and non-finite numbers (inf, nan, 1e400) are errors.
)");
}

}  // namespace ddpspawn
