// Fit's checkpoint paths, RNG states and resume checks (see checkpoint_connector.h).
#include "core/train/loop/checkpoint_connector.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/train/loop/optimizer_factory.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

std::string LastCheckpointPath(const TrainerOptions& options) {
  return options.default_root_dir + "/checkpoints/last.ckpt";
}

absl::StatusOr<OptimizerConfig> ResumedOptimizerConfig(const std::string& checkpoint_bytes,
                                                       LightningModule& module) {
  OptimizerConfig config = module.ConfigureOptimizers();
  ASSIGN_OR_RETURN(std::unique_ptr<torch::optim::Optimizer> optimizer,
                   MakeOptimizer(config, module.parameters()));
  if (absl::Status s = RestoreCheckpoint(checkpoint_bytes, module, optimizer.get(), nullptr);
      !s.ok()) {
    // What is wrong with the weights is said as it is; else it is the optimizer state.
    RETURN_IF_ERROR(RestoreCheckpoint(checkpoint_bytes, module, nullptr, nullptr));
    return absl::InvalidArgumentError(absl::StrCat(
        "its optimizer state cannot be restored into optimizer=", OptimizerName(config.optimizer),
        " (a resumed fit goes on with the optimizer that wrote the checkpoint; for another, "
        "start a new fit from its weights alone with checkpoint= instead of resume_from): ",
        s.message()));
  }
  // Every group has the configured options; a checkpoint's are all restored.
  const torch::optim::OptimizerOptions& saved = optimizer->param_groups().front().options();
  config.lr = saved.get_lr();
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&saved)) {
    config.momentum = sgd->momentum();
    config.weight_decay = sgd->weight_decay();
  } else if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&saved)) {
    config.weight_decay = adam->weight_decay();
    config.betas = std::make_pair(std::get<0>(adam->betas()), std::get<1>(adam->betas()));
    config.eps = adam->eps();
  } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&saved)) {
    config.weight_decay = adamw->weight_decay();
    config.betas = std::make_pair(std::get<0>(adamw->betas()), std::get<1>(adamw->betas()));
    config.eps = adamw->eps();
  } else if (const auto* rmsprop = dynamic_cast<const torch::optim::RMSpropOptions*>(&saved)) {
    config.momentum = rmsprop->momentum();
    config.weight_decay = rmsprop->weight_decay();
    config.eps = rmsprop->eps();
  } else if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradOptions*>(&saved)) {
    config.weight_decay = adagrad->weight_decay();
    config.eps = adagrad->eps();
  }
  return config;
}

absl::Status CheckResumableOn(const TrainingState& state, int world, const std::string& path,
                              bool epochs_limited) {
  const int64_t saved_by =
      state.world_size > 0 ? state.world_size : static_cast<int64_t>(state.cpu_rng_per_rank.size());
  if (state.batch_in_epoch == 0 || saved_by == 0 || saved_by == world || !epochs_limited) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "cannot resume from %s: it was saved mid-epoch (epoch %d, batch %d) by %d ranks, and with "
      "limit_train_batches or overfit_batches the rest of that epoch cannot be dealt to %d ranks "
      "(their batch counts are of whole epochs); resume on %d ranks, or from a checkpoint saved "
      "at an epoch's end",
      path, state.epoch + 1, state.batch_in_epoch, saved_by, world, saved_by));
}

absl::StatusOr<std::vector<at::Tensor>> GatherRngStates(DDPSpawnStrategy& strategy) {
  at::Tensor mine = at::detail::getDefaultCPUGenerator().get_state();
  ASSIGN_OR_RETURN(at::Tensor all, strategy.AllGather(mine));
  std::vector<at::Tensor> states;
  for (int64_t r = 0; r < all.size(0); ++r) states.push_back(all[r].clone());
  return states;
}

}  // namespace ddpspawn
