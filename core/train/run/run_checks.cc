// The checks before a run launches: CheckRun and its dry run of the model (see run_checks.h).
#include "core/train/run/run_checks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/model/checkpoint.h"
#include "core/model/module.h"
#include "core/model/sharded_checkpoint.h"
#include "core/model/weights_io.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/strategy/module_sharding.h"
#include "core/train/callbacks/lr_scheduler.h"
#include "core/train/data/dataset.h"
#include "core/train/loop/checkpoint_connector.h"
#include "core/train/run/run_inputs.h"
#include "core/util/exception_status.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// resume_from a sharded checkpoint: a run that shards, and, for one saved mid-epoch, as many ranks
// as saved it. (Its parameters' names and shapes are checked by the ranks, each reading its rows.)
absl::Status CheckShardedResume(const RunConfig& config, const std::string& path) {
  if (config.sharding_strategy == ShardingStrategy::kNoShard || config.world_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resume_from ", path,
        " is a sharded checkpoint (state_dict_type sharded), which resumes under "
        "sharding_strategy shard_grad_op or full_shard on more than one rank; to go on otherwise, "
        "export its weights "
        "(ddpspawn export --checkpoint ",
        path, ") and start a new fit from them with checkpoint="));
  }
  ASSIGN_OR_RETURN(std::string extra, ReadShardedCheckpointExtra(path));
  absl::StatusOr<TrainingState> saved = ParseTrainingState(extra);
  if (!saved.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": ", saved.status().message()));
  }
  return CheckResumableOn(*saved, config.world_size, path, EpochsLimited(config.trainer));
}

// Runs the step the command needs on the first two samples, so that a model that lacks it, or
// cannot digest this data (shapes, label dtype), fails here with the file's name rather than in
// every rank. One intra-op thread, so no OpenMP team exists when ranks are forked afterwards.
absl::Status DryRun(const RunConfig& config, LightningModule& module, const Dataset& data,
                    Command command) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  c10::NoGradGuard no_grad;
  const int64_t n = std::min<int64_t>(2, data.size());
  Batch batch = {data.features.narrow(0, 0, n), data.labels.narrow(0, 0, n)};
  absl::Status status;
  try {
    module.SetTraining(command == Command::kFit);
    switch (command) {
      case Command::kFit:
        status = module.TrainingStep(batch, 0).status();
        break;
      case Command::kPredict:
        status = module.PredictStep(batch, 0).status();
        break;
      case Command::kTest:
        status = module.TestStep(batch, 0).status();
        break;
      case Command::kValidate:
        status = module.ValidationStep(batch, 0).status();
        break;
    }
  } catch (const std::exception& e) {
    status = absl::InvalidArgumentError(ExceptionMessage(e));
  }
  at::set_num_threads(threads);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("the model ", config.model, " cannot run ",
                   command == Command::kFit ? "training" : CommandName(command), " on ",
                   data.source, ": ", status.message()));
}

// The shortest text that reads back as `value`.
std::string ShortestText(double value) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, end.ptr);
}

// A resumed fit keeps the learning rate, momentum and weight decay of the optimizer state it
// restores: one given now with another value would be ignored, so it is refused. (A schedule sets
// the rate from lr again, so there lr is used.)
absl::Status CheckNothingGivenIsOverridden(const RunConfig& config,
                                           const OptimizerConfig& resumed) {
  const bool scheduled =
      config.lr_scheduler.schedule != LrSchedule::kNone || config.optimizer.step_lr_every > 0;
  struct Overridden {
    const char* key;
    std::string given;
    std::string saved;
  };
  auto pair_text = [](const std::optional<std::pair<double, double>>& pair) {
    return pair ? absl::StrCat(ShortestText(pair->first), ",", ShortestText(pair->second))
                : std::string("(none)");
  };
  auto optional_text = [](const std::optional<double>& value) {
    return value ? ShortestText(*value) : std::string("(none)");
  };
  for (const Overridden& option :
       {Overridden{"lr", ShortestText(config.optimizer.lr), ShortestText(resumed.lr)},
        {"momentum", ShortestText(config.optimizer.momentum), ShortestText(resumed.momentum)},
        {"weight_decay", ShortestText(config.optimizer.weight_decay),
         ShortestText(resumed.weight_decay)},
        {"betas", pair_text(config.optimizer.betas), pair_text(resumed.betas)},
        {"eps", optional_text(config.optimizer.eps), optional_text(resumed.eps)}}) {
    if (config.given.count(option.key) == 0 || option.given == option.saved) continue;
    if (absl::string_view(option.key) == "lr" && scheduled) continue;
    const std::string& path = config.trainer.resume_from;
    const std::string& saved = option.saved;
    return absl::InvalidArgumentError(absl::StrCat(
        "option ", option.key, "=", option.given, ": the optimizer state in ", path, " has ",
        option.key, " ", saved,
        ", and a resumed fit keeps it (as torch's load_state_dict does). Resume with ", option.key,
        "=", saved,
        " or without the option, or start a new fit from the checkpoint's weights alone with "
        "checkpoint=",
        path, " instead of resume_from (a fresh optimizer)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRun(const RunConfig& config) {
  // fit's rank 0 appends to it; a planted link is refused now, not once the ranks run.
  if (config.command == Command::kFit) {
    RETURN_IF_ERROR(CheckAppendable(absl::StrCat(config.trainer.default_root_dir, "/metrics.csv")));
  }
  ASSIGN_OR_RETURN(Dataset data, PrimaryData(config));
  if (data.size() < config.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(data.source, " has ", data.size(),
                                                   " samples, fewer than the ", config.world_size,
                                                   " ranks"));
  }
  std::optional<Dataset> val;
  if (!config.val.empty()) {
    ASSIGN_OR_RETURN(Dataset loaded, LoadData(config, "val", config.val, config.val_labels));
    val = std::move(loaded);
  }
  for (const auto& [option, path] :
       {std::pair<const char*, const std::string*>{"checkpoint", &config.checkpoint},
        {"resume_from", &config.trainer.resume_from}}) {
    if (!path->empty() && !std::filesystem::exists(*path)) {
      return absl::NotFoundError(
          absl::StrCat("option ", option, ": checkpoint ", *path, " does not exist"));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<LightningModule> module, LoadModel(config, data));
  // Both are verified (checksum, tensor names and shapes) before any rank starts.
  for (const std::string* path : {&config.trainer.resume_from, &config.checkpoint}) {
    if (path->empty()) continue;
    // Weights only (--checkpoint) may come from torch or safetensors too, or a sharded checkpoint.
    if (path == &config.checkpoint) {
      if (absl::Status s = LoadWeightsAt(*path, *module); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint ", *path, ": ", s.message()));
      }
      continue;
    }
    // A sharded checkpoint is read by each rank, its shards only: here, where training stands.
    if (IsShardedCheckpoint(*path)) {
      RETURN_IF_ERROR(CheckShardedResume(config, *path));
      continue;
    }
    ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(*path));
    absl::StatusOr<OptimizerConfig> resumed = ResumedOptimizerConfig(bytes, *module);
    if (!resumed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", *path, ": ", resumed.status().message()));
    }
    RETURN_IF_ERROR(CheckNothingGivenIsOverridden(config, *resumed));
    TrainingState saved;
    RETURN_IF_ERROR(RestoreCheckpoint(bytes, *module, nullptr, &saved));
    RETURN_IF_ERROR(
        CheckResumableOn(saved, config.world_size, *path, EpochsLimited(config.trainer)));
  }
  // What every rank's Setup() does, on this copy: a model where sync_batchnorm would change nothing
  // is refused now, not in the ranks (or not at all).
  if (config.sync_batchnorm) {
    if (absl::Status s = ApplySyncBatchNorm(*module); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("model ", config.model, ": ", s.message()));
    }
  }
  if (absl::Status s = CheckAutoWrap(*module, config.auto_wrap_min_params); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", config.model, ": ", s.message()));
  }
  RETURN_IF_ERROR(DryRun(config, *module, data, config.command));
  // The validation set must fit the model as well as the training set.
  if (config.command != Command::kFit || !val.has_value()) return absl::OkStatus();
  if (absl::StartsWith(config.model, "mlp:")) {
    RETURN_IF_ERROR(CheckDataFitsMlp(config, *module, *val));
  }
  return DryRun(config, *module, *val, Command::kValidate);
}

}  // namespace ddpspawn
