// Checkpoint serialization (see checkpoint.h).
#include "core/model/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/model/sealed_archive.h"
#include "core/model/weights_io.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// What the archive says it is (sealed_archive.h).
constexpr absl::string_view kCheckpointKind = "ddpspawn-checkpoint";
constexpr absl::string_view kTrainingStateKind = "ddpspawn-training-state";

// Keys of the weights (model.<name>) and of the callbacks' states (callback.<name>).
constexpr absl::string_view kModelPrefix = "model.";
constexpr absl::string_view kCallbackPrefix = "callback.";

// Writes where training stands into `archive`; RestoreTrainingState reads it back.
void WriteTrainingState(const TrainingState& state, torch::serialize::OutputArchive& archive) {
  archive.write("epoch", c10::IValue(state.epoch));
  archive.write("batch_in_epoch", c10::IValue(state.batch_in_epoch));
  archive.write("global_step", c10::IValue(state.global_step));
  if (state.epoch_start > 0) archive.write("epoch_start", c10::IValue(state.epoch_start));
  if (state.world_size > 0) archive.write("world_size", c10::IValue(state.world_size));
  for (size_t r = 0; r < state.cpu_rng_per_rank.size(); ++r) {
    archive.write(absl::StrCat("rng.cpu.", r), state.cpu_rng_per_rank[r]);
  }
  if (state.grad_scale > 0) {
    archive.write("grad_scaler.scale", c10::IValue(state.grad_scale));
    archive.write("grad_scaler.growth_tracker", c10::IValue(state.grad_scale_growth_tracker));
  }
  for (const auto& [name, callback_state] : state.callback_states) {
    archive.write(absl::StrCat(kCallbackPrefix, name), c10::IValue(callback_state));
  }
  if (state.epoch_loss_batches > 0) {
    archive.write("epoch_loss.batches", c10::IValue(state.epoch_loss_batches));
    archive.write("epoch_loss.sum_per_rank",
                  at::tensor(state.epoch_loss_sum_per_rank, at::kDouble));
  }
}

}  // namespace

absl::StatusOr<std::string> SerializeCheckpoint(LightningModule& module,
                                                torch::optim::Optimizer* optimizer,
                                                const TrainingState& state) {
  std::string bytes;
  absl::Status status = InvalidInputOnException("serializing the checkpoint", [&] {
    torch::serialize::OutputArchive archive;
    for (const auto& [name, tensor] : module.named_state()) {
      archive.write(absl::StrCat(kModelPrefix, name), tensor.detach().cpu());
    }
    if (optimizer != nullptr) {
      torch::serialize::OutputArchive optimizer_archive;
      optimizer->save(optimizer_archive);
      archive.write("optimizer", optimizer_archive);
    }
    WriteTrainingState(state, archive);
    ASSIGN_OR_RETURN(bytes, SealArchive(kCheckpointKind, archive));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return bytes;
}

namespace {

// Verifies `bytes` whole (a damaged file is refused before anything is read from it) and opens its
// archive; tensors load onto `device` (none: the CPU).
absl::Status OpenCheckpointArchive(const std::string& bytes, c10::optional<c10::Device> device,
                                   torch::serialize::InputArchive& archive) {
  return OpenSealedArchive(bytes, kCheckpointKind, device, archive);
}

}  // namespace

absl::StatusOr<NamedTensors> ReadCheckpointWeights(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  RETURN_IF_ERROR(OpenCheckpointArchive(bytes, c10::Device(c10::kCPU), archive));
  NamedTensors weights;
  for (const std::string& key : archive.keys()) {
    if (!absl::StartsWith(key, kModelPrefix)) continue;
    at::Tensor tensor;  // a fresh one each time (see RestoreCheckpoint)
    if (!archive.try_read(key, tensor)) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint's '", key, "' is unreadable"));
    }
    const std::string name = key.substr(kModelPrefix.size());
    RETURN_IF_ERROR(CheckWeightTensor(name, tensor));
    weights.emplace_back(name, tensor);
  }
  if (weights.empty()) return absl::InvalidArgumentError("the checkpoint holds no weights");
  return weights;
}

namespace {

// Copies each of the module's tensors from the archive into the module.
absl::Status RestoreModelTensors(torch::serialize::InputArchive& archive, LightningModule& module) {
  for (const auto& [name, tensor] : module.named_state()) {
    at::Tensor saved;
    if (!archive.try_read(absl::StrCat(kModelPrefix, name), saved)) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no tensor '", name,
                                                     "': was it saved from another model?"));
    }
    if (saved.sizes() != tensor.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has shape ", c10::str(saved.sizes()),
                       " in the checkpoint but ", c10::str(tensor.sizes()), " in the model"));
    }
    // A tensor of an exotic dtype (a format-1 file has no checksum to stop one) may not copy: an
    // error, not an exception through the caller.
    at::Tensor target = tensor;  // a handle: a lambda cannot capture a binding in C++17
    RETURN_IF_ERROR(
        InvalidInputOnException(absl::StrCat("restoring tensor '", name, "'"), [&target, &saved] {
          target.copy_(saved);
          return absl::OkStatus();
        }));
  }
  return absl::OkStatus();
}

// Loads the archive's optimizer state into `optimizer`.
absl::Status RestoreOptimizerState(torch::serialize::InputArchive& archive,
                                   torch::optim::Optimizer& optimizer) {
  return InvalidInputOnException("restoring the optimizer state", [&] {
    torch::serialize::InputArchive optimizer_archive;
    if (!archive.try_read("optimizer", optimizer_archive)) {
      return absl::InvalidArgumentError("the checkpoint has no optimizer state");
    }
    optimizer.load(optimizer_archive);
    return absl::OkStatus();
  });
}

// Reads the counters, RNG states, epoch loss, callback states and grad scaler into `state`.
absl::Status RestoreTrainingState(torch::serialize::InputArchive& archive, TrainingState& state) {
  c10::IValue value;
  for (auto [key, field] : {std::make_pair("epoch", &state.epoch),
                            std::make_pair("batch_in_epoch", &state.batch_in_epoch),
                            std::make_pair("global_step", &state.global_step)}) {
    if (!archive.try_read(key, value) || !value.isInt()) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no '", key, "'"));
    }
    *field = value.toInt();
  }
  state.world_size = archive.try_read("world_size", value) && value.isInt() ? value.toInt() : 0;
  state.epoch_start = archive.try_read("epoch_start", value) && value.isInt() ? value.toInt() : 0;
  state.cpu_rng_per_rank.clear();
  while (true) {
    // A fresh tensor for each rank: try_read into a tensor already read set_()s it to the new data,
    // and every state kept so far (.cpu() of a CPU tensor is the same tensor) would become the last
    // rank's.
    at::Tensor rng;
    if (!archive.try_read(absl::StrCat("rng.cpu.", state.cpu_rng_per_rank.size()), rng)) break;
    state.cpu_rng_per_rank.push_back(rng.cpu());
  }
  // Absent (saved at an epoch's end, or by an earlier version): none.
  state.epoch_loss_batches = 0;
  state.epoch_loss_sum_per_rank.clear();
  at::Tensor sums;
  if (archive.try_read("epoch_loss.batches", value) && value.isInt() &&
      archive.try_read("epoch_loss.sum_per_rank", sums)) {
    at::Tensor flat = sums.to(at::kCPU, at::kDouble).contiguous().view(-1);
    state.epoch_loss_sum_per_rank.assign(flat.data_ptr<double>(),
                                         flat.data_ptr<double>() + flat.numel());
    state.epoch_loss_batches = value.toInt();
  }
  state.callback_states.clear();
  for (const std::string& key : archive.keys()) {
    if (absl::StartsWith(key, kCallbackPrefix) && archive.try_read(key, value) &&
        value.isString()) {
      state.callback_states[key.substr(kCallbackPrefix.size())] = value.toStringRef();
    }
  }
  state.grad_scale = 0;
  state.grad_scale_growth_tracker = 0;
  if (archive.try_read("grad_scaler.scale", value) && value.isDouble()) {
    state.grad_scale = value.toDouble();
    if (archive.try_read("grad_scaler.growth_tracker", value) && value.isInt()) {
      state.grad_scale_growth_tracker = value.toInt();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreCheckpoint(const std::string& bytes, LightningModule& module,
                               torch::optim::Optimizer* optimizer, TrainingState* state) {
  // Tensors come back on the module's device (a checkpoint saved on one device loads on another);
  // the RNG states go back to the CPU.
  std::vector<at::Tensor> params = module.parameters();
  torch::serialize::InputArchive archive;
  RETURN_IF_ERROR(OpenCheckpointArchive(bytes,
                                        params.empty()
                                            ? c10::optional<c10::Device>()
                                            : c10::optional<c10::Device>(params.front().device()),
                                        archive));
  c10::NoGradGuard no_grad;
  RETURN_IF_ERROR(RestoreModelTensors(archive, module));
  if (optimizer != nullptr) {
    RETURN_IF_ERROR(RestoreOptimizerState(archive, *optimizer));
  }
  if (state != nullptr) {
    RETURN_IF_ERROR(RestoreTrainingState(archive, *state));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingState> ReadCheckpointTrainingState(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  RETURN_IF_ERROR(OpenCheckpointArchive(bytes, c10::Device(c10::kCPU), archive));
  TrainingState state;
  RETURN_IF_ERROR(RestoreTrainingState(archive, state));
  return state;
}

absl::StatusOr<std::string> SerializeTrainingState(const TrainingState& state) {
  torch::serialize::OutputArchive archive;
  RETURN_IF_ERROR(InvalidInputOnException("serializing the training state", [&] {
    WriteTrainingState(state, archive);
    return absl::OkStatus();
  }));
  return SealArchive(kTrainingStateKind, archive);
}

absl::StatusOr<TrainingState> ParseTrainingState(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  RETURN_IF_ERROR(OpenSealedArchive(bytes, kTrainingStateKind, c10::Device(c10::kCPU), archive));
  TrainingState state;
  RETURN_IF_ERROR(RestoreTrainingState(archive, state));
  return state;
}

}  // namespace ddpspawn
