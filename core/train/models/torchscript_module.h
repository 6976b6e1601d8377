// A LightningModule backed by a TorchScript module, so a model scripted in Python (or by any tool
// that writes TorchScript) trains in C++ with no Python. The module exports its steps with
// @torch.jit.export and these signatures:
//
//   training_step(self, batch: List[Tensor], batch_idx: int) -> Tensor
//   (required) validation_step(self, batch: List[Tensor], batch_idx: int) ->
//   Dict[str, Tensor] test_step(self, batch: List[Tensor], batch_idx: int) ->
//   Dict[str, Tensor]   (default: validation_step) predict_step(self, batch:
//   List[Tensor], batch_idx: int) -> Tensor
//
// Loading checks every step that exists against its signature; a missing training_step or a wrong
// signature is an error that says what is expected.
#ifndef DDPSPAWN_CORE_TRAIN_MODELS_TORCHSCRIPT_MODULE_H_
#define DDPSPAWN_CORE_TRAIN_MODELS_TORCHSCRIPT_MODULE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/module.h"

namespace ddpspawn {

// Thread-compatible, as LibTorch modules are: one thread at a time uses it. It owns the loaded
// script module, whose tensors the accessors share.
class TorchScriptModule : public LightningModule {
 public:
  // `optimizer` is what ConfigureOptimizers() returns (TorchScript cannot build optimizers).
  static absl::StatusOr<std::shared_ptr<TorchScriptModule>> Load(
      const std::string& path, const OptimizerConfig& optimizer = {});
  ~TorchScriptModule() override;

  std::vector<at::Tensor> parameters() override;
  std::vector<at::Tensor> buffers() override;
  NamedTensors named_state() override;
  absl::Status To(const c10::Device& device) override;
  void SetTraining(bool training) override;
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, int64_t batch_index) override;
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch, int64_t batch_index) override;
  absl::StatusOr<StepMetrics> TestStep(const Batch& batch, int64_t batch_index) override;
  absl::StatusOr<at::Tensor> PredictStep(const Batch& batch, int64_t batch_index) override;
  OptimizerConfig ConfigureOptimizers() override { return optimizer_; }

  // Writes the module (with its current weights) back as TorchScript.
  absl::Status Save(const std::string& path);

 private:
  struct Impl;
  explicit TorchScriptModule(std::unique_ptr<Impl> impl, OptimizerConfig optimizer);
  std::unique_ptr<Impl> impl_;
  OptimizerConfig optimizer_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_MODELS_TORCHSCRIPT_MODULE_H_
