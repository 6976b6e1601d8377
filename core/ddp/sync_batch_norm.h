// PyTorch's SyncBatchNorm for LibTorch modules: in training, the batch statistics (each channel's
// mean and variance) are those of every rank's batch together, with one all-reduce in forward and
// one in backward, so N ranks with batch b normalize, and learn, as one process with batch N*b; the
// running statistics are the same on every rank. In eval mode, or with no process group, it is
// BatchNorm. DistributedDataParallel::Wrap gives every SyncBatchNorm in the module its group;
// ConvertSyncBatchNorm puts them in place of BatchNorm layers.
#ifndef DDPSPAWN_CORE_DDP_SYNC_BATCH_NORM_H_
#define DDPSPAWN_CORE_DDP_SYNC_BATCH_NORM_H_

#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ddpspawn {

class ProcessGroup;

// Thread-compatible, as LibTorch modules are; its group must outlive its forward and backward
// passes.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(int64_t num_features)
      : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);
  // A BatchNorm's own tensors, which the layer takes over (not copies), as
  // torch.nn.SyncBatchNorm.convert_sync_batchnorm does: an optimizer made on the BatchNorm's
  // parameters trains this layer's, and a frozen parameter stays frozen. Undefined ones are made as
  // by reset().
  struct Adopted {
    at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  };
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, const Adopted& adopted);

  void reset() override;
  // Input [N, C, ...]: any number of dimensions after the channels.
  at::Tensor forward(const at::Tensor& input);

  // The ranks whose batches are normalized together; null: this process's batch alone.
  void set_process_group(ProcessGroup* group) { group_ = group; }
  ProcessGroup* process_group() const { return group_; }

  torch::nn::BatchNormOptions options;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  ProcessGroup* group_ = nullptr;
};
TORCH_MODULE(SyncBatchNorm);

// Replaces each BatchNorm1d/2d/3d in `module`'s Sequential containers (found recursively) with a
// SyncBatchNorm holding its options and its very weight, bias and running-statistics tensors
// (SyncBatchNormImpl::Adopted); returns how many it replaced. A BatchNorm that another kind of
// module holds is an error naming it: such a module keeps its own pointer to the layer, so declare
// a SyncBatchNorm there instead. FailedPrecondition for a module that a live
// DistributedDataParallel wraps (or holds a part of): the new layers would have no process group;
// convert before wrapping.
absl::StatusOr<int> ConvertSyncBatchNorm(const std::shared_ptr<torch::nn::Module>& module);

// The name of the first BatchNorm1d/2d/3d in `module` (itself included) in named_modules() order;
// empty when it holds none.
std::string FirstBatchNormName(const torch::nn::Module& module);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_SYNC_BATCH_NORM_H_
