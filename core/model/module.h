// The module interface a strategy and a trainer train, in the spirit of LightningModule: the
// tensors DDP keeps in sync, the steps, and the optimizer to use. NnModule adapts a
// torch::nn::Module; TorchScriptModule (core/train/models/torchscript_module.h) a scripted one.
// Errors are Status values, not exceptions.
#ifndef DDPSPAWN_CORE_MODEL_MODULE_H_
#define DDPSPAWN_CORE_MODEL_MODULE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

class FullShard;  // core/ddp/full_shard.h

// A batch: the tensors a data loader yields (e.g. {features, labels}).
using Batch = std::vector<at::Tensor>;
// Named values a step reports, e.g. {"val_loss", ...}.
using StepMetrics = std::map<std::string, at::Tensor>;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The optimizers fit can make by name (torch::optim's SGD, Adam, AdamW, RMSprop and Adagrad).
enum class Optimizer { kSgd, kAdam, kAdamW, kRmsprop, kAdagrad };
// "sgd", "adam", "adamw", "rmsprop", "adagrad": the run option's values.
absl::string_view OptimizerName(Optimizer optimizer);
absl::StatusOr<Optimizer> ParseOptimizer(absl::string_view name);
// "SGD", "Adam", "AdamW", "RMSprop", "Adagrad": torch's class names (Lightning's lr-<name> metric).
absl::string_view OptimizerClassName(Optimizer optimizer);

// configure_optimizers: the optimizer and a step learning-rate schedule.
struct OptimizerConfig {
  Optimizer optimizer = Optimizer::kSgd;
  double lr = 0.01;
  double momentum = 0.0;  // sgd, rmsprop
  // adam, adamw: the running averages' coefficients; unset: torch's (0.9, 0.999).
  std::optional<std::pair<double, double>> betas;
  // adam, adamw, rmsprop, adagrad: the term added to the denominator; unset: torch's default for
  // that optimizer (1e-8; Adagrad's 1e-10).
  std::optional<double> eps;
  // Any torch::optim optimizer (with parameter groups, its own options): when set, fit steps the
  // one it returns for the parameters that take gradients, and `optimizer`, lr, momentum, betas,
  // eps and weight_decay are not used (lr is still the base rate of the schedules). Its class name
  // is `custom_name` (Lightning's lr-<name> metric).
  std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& trainable)>
      custom;
  std::string custom_name = "Optimizer";
  double weight_decay = 0.0;
  int64_t step_lr_every = 0;  // epochs between decays; 0: constant
  double step_lr_gamma = 0.1;
};

// A value a training step logged (LightningModule::Log).
struct LoggedValue {
  std::string name;
  double value = 0;
  bool sync_dist = false;
};

// Thread-compatible: implementations take no lock, so one thread at a time uses a module (fit runs
// its steps on the rank's training thread). Ownership: the tensors it returns share storage with
// its own; strategies and trainers share the module (shared_ptr) with their caller.
class LightningModule {
 public:
  virtual ~LightningModule() = default;
  // Every parameter (DDP syncs those that require grad) and buffer, and both by name (the
  // checkpoint's state dict).
  virtual std::vector<at::Tensor> parameters() = 0;
  virtual std::vector<at::Tensor> buffers() = 0;
  virtual NamedTensors named_state() = 0;
  virtual absl::Status To(const c10::Device& device) = 0;
  virtual void SetTraining(bool training) = 0;

  // Returns the loss to minimize.
  virtual absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, int64_t batch_index) = 0;
  virtual absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch, int64_t batch_index) = 0;
  virtual absl::StatusOr<StepMetrics> TestStep(const Batch& batch, int64_t batch_index) {
    return ValidationStep(batch, batch_index);
  }
  virtual absl::StatusOr<at::Tensor> PredictStep(const Batch& batch, int64_t batch_index) = 0;
  virtual OptimizerConfig ConfigureOptimizers() { return {}; }

  // sharding_strategy full_shard (core/ddp/full_shard.h): a module whose forward can run its parts
  // through a FullShard names those parts (FSDP's units, under the module that network() would
  // give), and from UseFullShard() on runs them through it (null: directly again). Empty (the
  // default): full_shard is refused for this module.
  virtual std::vector<std::shared_ptr<torch::nn::Module>> ShardUnits() { return {}; }
  virtual void UseFullShard(FullShard* /*shard*/) {}

  // Lightning's self.log, from TrainingStep: fit logs `name` at each log_every_n_steps point (the
  // mean of the values since the last one) and `<name>_epoch` at the epoch's end (the epoch's
  // mean), to metrics.csv, the callbacks' metrics and fit's result. With sync_dist, the mean over
  // the ranks of each rank's mean; without, rank 0's: either way every rank's callbacks see the
  // same value. Every rank logs the same names, each always with or always without sync_dist, or
  // fit ends with an error that lists each rank's names. "train_loss" is fit's own. (Evaluation
  // steps report their metrics by returning them.)
  void Log(std::string name, double value, bool sync_dist = false) {
    logged_.push_back({std::move(name), value, sync_dist});
  }
  // The values logged since the last call, in order (fit takes them after each training step).
  std::vector<LoggedValue> TakeLogged() { return std::exchange(logged_, {}); }

 private:
  std::vector<LoggedValue> logged_;
};

// A LightningModule whose tensors live in a torch::nn::Module, which it shares with its caller
// (network()). Thread-compatible, as LibTorch modules are.
class NnModule : public LightningModule {
 public:
  explicit NnModule(std::shared_ptr<torch::nn::Module> network) : network_(std::move(network)) {}
  std::shared_ptr<torch::nn::Module> network() { return network_; }
  std::vector<at::Tensor> parameters() override;
  std::vector<at::Tensor> buffers() override;
  NamedTensors named_state() override;
  absl::Status To(const c10::Device& device) override;
  void SetTraining(bool training) override;

 private:
  std::shared_ptr<torch::nn::Module> network_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_MODULE_H_
