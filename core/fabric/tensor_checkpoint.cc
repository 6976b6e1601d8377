// Checkpoints of named tensors in the Trainer's format (see tensor_checkpoint.h).
#include "core/fabric/tensor_checkpoint.h"

#include <ATen/core/Tensor.h>
#include <c10/util/StringUtil.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/process_group.h"
#include "core/model/checkpoint.h"
#include "core/strategy/checkpoint_io.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

namespace {

// A module that is only its named tensors: what SerializeCheckpoint writes as the model's state.
// Borrows the tensors (their handles share storage with the caller's). Thread-compatible.
class TensorsModule final : public LightningModule {
 public:
  explicit TensorsModule(const NamedTensors& tensors) : tensors_(tensors) {}
  std::vector<at::Tensor> parameters() override {
    std::vector<at::Tensor> all;
    for (const auto& named : tensors_) all.push_back(named.second);
    return all;
  }
  std::vector<at::Tensor> buffers() override { return {}; }
  NamedTensors named_state() override { return tensors_; }
  absl::Status To(const c10::Device& /*device*/) override { return NoModel(); }
  void SetTraining(bool /*training*/) override {}
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& /*batch*/, int64_t /*index*/) override {
    return NoModel();
  }
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& /*batch*/, int64_t /*index*/) override {
    return NoModel();
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch& /*batch*/, int64_t /*index*/) override {
    return NoModel();
  }

 private:
  static absl::Status NoModel() {
    return absl::UnimplementedError("a checkpoint's named tensors are not a model to run");
  }
  const NamedTensors& tensors_;
};

absl::Status CheckNames(const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors[i].first;
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " has no name"));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("the name '", name, "' is given twice"));
    }
  }
  return absl::OkStatus();
}

// Rank 0's work: the tensors, the bytes, then the file.
absl::Status WriteOnRankZero(const std::string& path, int64_t step, int world_size,
                             const std::function<absl::StatusOr<NamedTensors>()>& make_tensors) {
  ASSIGN_OR_RETURN(NamedTensors tensors, make_tensors());
  if (tensors.empty()) return absl::InvalidArgumentError("no tensor to save");
  RETURN_IF_ERROR(CheckNames(tensors));
  TensorsModule module(tensors);
  TrainingState state;
  state.global_step = step;
  state.world_size = world_size;
  ASSIGN_OR_RETURN(std::string bytes, SerializeCheckpoint(module, nullptr, state));
  return MakeAtomicFileCheckpointIO()->Save(bytes, path);
}

}  // namespace

absl::Status SaveTensorCheckpoint(
    ProcessGroup& group, const std::string& path, int64_t step,
    const std::function<absl::StatusOr<NamedTensors>()>& rank_zero_tensors) {
  absl::Status written = group.rank() == 0
                             ? WriteOnRankZero(path, step, group.world_size(), rank_zero_tensors)
                             : absl::OkStatus();
  if (group.world_size() == 1) return written;
  // Every rank learns rank 0's outcome and why.
  ASSIGN_OR_RETURN(std::string failure,
                   group.BroadcastBytes(written.ok() ? "" : written.ToString(), 0));
  if (!written.ok()) return written;
  if (!failure.empty()) {
    return absl::InternalError(
        absl::StrCat("rank 0 could not save the checkpoint ", path, ": ", failure));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LoadTensorCheckpoint(const std::string& path, const NamedTensors& tensors) {
  RETURN_IF_ERROR(CheckNames(tensors));
  ASSIGN_OR_RETURN(std::string bytes, MakeAtomicFileCheckpointIO()->Load(path));
  ASSIGN_OR_RETURN(NamedTensors saved_list, ReadCheckpointWeights(bytes));
  ASSIGN_OR_RETURN(TrainingState state, ReadCheckpointTrainingState(bytes));
  std::map<std::string, at::Tensor> saved(saved_list.begin(), saved_list.end());
  // Every tensor checked before any is written.
  for (const auto& [name, tensor] : tensors) {
    auto found = saved.find(name);
    if (found == saved.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the checkpoint ", path, " has no tensor '", name, "'"));
    }
    if (found->second.sizes() != tensor.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has shape ", c10::str(found->second.sizes()),
                       " in the checkpoint ", path, " but ", c10::str(tensor.sizes()), " here"));
    }
    if (found->second.scalar_type() != tensor.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' is ", c10::toString(found->second.scalar_type()),
          " in the checkpoint ", path, " but ", c10::toString(tensor.scalar_type()), " here"));
    }
  }
  RETURN_IF_ERROR(InvalidInputOnException("restoring the checkpoint's tensors", [&] {
    for (const auto& [name, tensor] : tensors) {
      at::Tensor target = tensor;
      target.copy_(saved.at(name));
    }
    return absl::OkStatus();
  }));
  return state.global_step;
}

}  // namespace ddpspawn
