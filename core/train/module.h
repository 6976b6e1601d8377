// The module interface a strategy trains, in the spirit of LightningModule: the
// network whose parameters DDP keeps in sync, and the steps. Errors are Status
// values, not exceptions.
#ifndef DDPSPAWN_CORE_TRAIN_MODULE_H_
#define DDPSPAWN_CORE_TRAIN_MODULE_H_

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ddpspawn {

// A batch: the tensors a data loader yields (e.g. {features, labels}).
using Batch = std::vector<at::Tensor>;
// Named values a step reports, e.g. {"val_loss", ...}.
using StepMetrics = std::map<std::string, at::Tensor>;

class LightningModule {
 public:
  virtual ~LightningModule() = default;
  // The parameters and buffers to train and keep in sync.
  virtual std::shared_ptr<torch::nn::Module> network() = 0;
  // Returns the loss to minimize.
  virtual absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch,
                                                  int64_t batch_index) = 0;
  virtual absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch,
                                                     int64_t batch_index) = 0;
  virtual absl::StatusOr<StepMetrics> TestStep(const Batch& batch,
                                               int64_t batch_index) {
    return ValidationStep(batch, batch_index);
  }
  virtual absl::StatusOr<at::Tensor> PredictStep(const Batch& batch,
                                                 int64_t batch_index) = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_MODULE_H_
