// SyncBatchNorm (see sync_batch_norm.h).
#include "core/ddp/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/process_group.h"
#include "core/ddp/wrap_registry.h"

namespace ddpspawn {
namespace {

// The dimensions a channel's statistics run over: all but the channels.
std::vector<int64_t> ReducedDims(const at::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// Sums `local` (float64) over the group's ranks, in place; throws, as autograd functions report
// errors.
void SumOverRanks(ProcessGroup* group, at::Tensor& local, const char* what) {
  if (group == nullptr || group->world_size() == 1) return;
  if (absl::Status s = group->AllReduce(local, ReduceOp::kSum); !s.ok()) {
    throw std::runtime_error(absl::StrCat("SyncBatchNorm ", what, ": ", s.message()));
  }
}

// The normalization with statistics over every rank's batch. Forward: the per-channel sum, sum of
// squares and count, summed over the ranks (float64), give the mean and the biased variance.
// Backward: with x^ the normalized input and g the incoming gradient, the input's gradient is w /
// std * (g - sum(g) / n - x^ * sum(g x^) / n), both sums over every rank's batch (n samples in
// all); the weight's and bias's are this rank's sums, which DDP then averages like any gradient.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const at::Tensor& bias, double eps,
                            ProcessGroup* group, at::Tensor* batch_mean, at::Tensor* batch_var,
                            double* count) {
    const std::vector<int64_t> dims = ReducedDims(input);
    const at::Tensor x = input.to(at::kDouble);
    const int64_t channels = input.size(1);
    const int64_t per_channel = input.numel() / channels;
    at::Tensor stats = at::cat({x.sum(dims), (x * x).sum(dims),
                                at::full({1}, static_cast<double>(per_channel), x.options())});
    SumOverRanks(group, stats, "forward");
    const double n = stats[2 * channels].item<double>();
    const at::Tensor mean = stats.narrow(0, 0, channels) / n;
    const at::Tensor var = (stats.narrow(0, channels, channels) / n - mean * mean).clamp_min(0);
    const at::Tensor invstd = (var + eps).rsqrt();
    std::vector<int64_t> shape(input.dim(), 1);
    shape[1] = channels;
    const at::Tensor normalized = (x - mean.view(shape)) * invstd.view(shape);
    at::Tensor out = normalized;
    if (weight.defined()) out = out * weight.to(at::kDouble).view(shape);
    if (bias.defined()) out = out + bias.to(at::kDouble).view(shape);
    ctx->save_for_backward({normalized, invstd, weight});
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["n"] = n;
    *batch_mean = mean;
    *batch_var = var;
    *count = n;
    return out.to(input.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    const at::Tensor& normalized = saved[0];
    const at::Tensor& invstd = saved[1];
    const at::Tensor& weight = saved[2];
    // The context keeps IValues only: the group travels as an integer.
    auto* group = reinterpret_cast<ProcessGroup*>(  // NOLINT(performance-no-int-to-ptr)
        ctx->saved_data["group"].toInt());
    const double n = ctx->saved_data["n"].toDouble();
    const at::Tensor g = grads[0].to(at::kDouble);
    const std::vector<int64_t> dims = ReducedDims(g);
    const int64_t channels = g.size(1);
    const at::Tensor sum_g = g.sum(dims), sum_g_normalized = (g * normalized).sum(dims);
    at::Tensor sums = at::cat({sum_g, sum_g_normalized});
    SumOverRanks(group, sums, "backward");
    std::vector<int64_t> shape(g.dim(), 1);
    shape[1] = channels;
    at::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight.to(at::kDouble);
    const at::Tensor grad_input =
        scale.view(shape) * (g - (sums.narrow(0, 0, channels) / n).view(shape) -
                             normalized * (sums.narrow(0, channels, channels) / n).view(shape));
    const at::ScalarType type = grads[0].scalar_type();
    return {grad_input.to(type),
            weight.defined() ? sum_g_normalized.to(weight.scalar_type()) : at::Tensor(),
            weight.defined() ? sum_g.to(weight.scalar_type()) : at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// `batch_norm` as a SyncBatchNorm with its options, and its own weight, bias and statistics
// tensors.
template <typename BatchNorm>
SyncBatchNorm Converted(const BatchNorm& batch_norm) {
  return SyncBatchNorm(
      batch_norm->options,
      SyncBatchNormImpl::Adopted{batch_norm->weight, batch_norm->bias, batch_norm->running_mean,
                                 batch_norm->running_var, batch_norm->num_batches_tracked});
}

// A SyncBatchNorm in place of `module` when it is a BatchNorm; else null.
std::shared_ptr<torch::nn::Module> Replacement(const std::shared_ptr<torch::nn::Module>& module) {
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(module)) {
    return Converted(torch::nn::BatchNorm1d(bn)).ptr();
  }
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(module)) {
    return Converted(torch::nn::BatchNorm2d(bn)).ptr();
  }
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(module)) {
    return Converted(torch::nn::BatchNorm3d(bn)).ptr();
  }
  return nullptr;
}

absl::StatusOr<int> ConvertIn(const std::shared_ptr<torch::nn::Module>& module,
                              const std::string& path) {
  int replaced = 0;
  auto sequential = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module);
  const auto children = module->named_children();
  size_t index = 0;
  for (const auto& child : children) {
    const std::string name = path.empty() ? child.key() : absl::StrCat(path, ".", child.key());
    if (std::shared_ptr<torch::nn::Module> sync = Replacement(child.value())) {
      if (sequential == nullptr || index >= sequential->size() ||
          sequential->ptr(index) != child.value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("BatchNorm '", name, "' belongs to a ", module->name(),
                         ", which keeps its own pointer to it: declare a SyncBatchNorm there (only "
                         "Sequential containers are converted)"));
      }
      *(sequential->begin() + static_cast<std::ptrdiff_t>(index)) =
          torch::nn::AnyModule(std::dynamic_pointer_cast<SyncBatchNormImpl>(sync));
      module->replace_module(child.key(), sync);
      ++replaced;
    } else {
      absl::StatusOr<int> inner = ConvertIn(child.value(), name);
      if (!inner.ok()) return inner.status();
      replaced += *inner;
    }
    ++index;
  }
  return replaced;
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_)
    : options(options_) {
  reset();
}

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_,
                                     const Adopted& adopted)
    : options(options_) {
  const int64_t n = options.num_features();
  if (options.affine()) {
    const auto parameter = [this](const char* name, const at::Tensor& given, at::Tensor made) {
      return given.defined() ? register_parameter(name, given, given.requires_grad())
                             : register_parameter(name, std::move(made));
    };
    weight = parameter("weight", adopted.weight, at::ones({n}));
    bias = parameter("bias", adopted.bias, at::zeros({n}));
  }
  if (options.track_running_stats()) {
    const auto buffer = [this](const char* name, const at::Tensor& given, const at::Tensor& made) {
      return register_buffer(name, given.defined() ? given : made);
    };
    running_mean = buffer("running_mean", adopted.running_mean, at::zeros({n}));
    running_var = buffer("running_var", adopted.running_var, at::ones({n}));
    num_batches_tracked =
        buffer("num_batches_tracked", adopted.num_batches_tracked, at::zeros({}, at::kLong));
  }
}

void SyncBatchNormImpl::reset() {
  if (options.affine()) {
    weight = register_parameter("weight", at::ones({options.num_features()}));
    bias = register_parameter("bias", at::zeros({options.num_features()}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({options.num_features()}));
    running_var = register_buffer("running_var", at::ones({options.num_features()}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options.num_features()) {
    throw std::invalid_argument(absl::StrCat("SyncBatchNorm of ", options.num_features(),
                                             " channels got input of shape ",
                                             c10::str(input.sizes())));
  }
  if (!is_training() && options.track_running_stats()) {
    return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                     /*training=*/false, 0.0, options.eps());
  }
  at::Tensor mean, var;
  double count = 0;
  at::Tensor out =
      SyncBatchNormFunction::apply(input, weight, bias, options.eps(), group_, &mean, &var, &count);
  if (options.track_running_stats()) {
    c10::NoGradGuard no_grad;
    num_batches_tracked += 1;
    // momentum None: the cumulative average, as PyTorch.
    const double momentum = options.momentum().has_value()
                                ? *options.momentum()
                                : 1.0 / num_batches_tracked.item<double>();
    const double unbias = count > 1 ? count / (count - 1) : 1.0;
    running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
    running_var.mul_(1 - momentum).add_((var * unbias).to(running_var.scalar_type()), momentum);
  }
  return out;
}

absl::StatusOr<int> ConvertSyncBatchNorm(const std::shared_ptr<torch::nn::Module>& module) {
  if (module == nullptr) return absl::InvalidArgumentError("the module must not be null");
  if (IsWrapped(*module)) {
    return absl::FailedPreconditionError(
        "ConvertSyncBatchNorm on a module that a DistributedDataParallel already wraps: the new "
        "layers would have no process group, so each rank would normalize its own batch alone; "
        "convert before Distribute (or give the strategy sync_batchnorm and use "
        "Distribute(model, strategy), which converts first)");
  }
  return ConvertIn(module, "");
}

std::string FirstBatchNormName(const torch::nn::Module& module) {
  const auto is_batch_norm = [](const torch::nn::Module* layer) {
    return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(layer) != nullptr ||
           dynamic_cast<const torch::nn::BatchNorm2dImpl*>(layer) != nullptr ||
           dynamic_cast<const torch::nn::BatchNorm3dImpl*>(layer) != nullptr;
  };
  // Not named_modules(include_self=true): it throws for a module held by value.
  if (is_batch_norm(&module)) return "(the module itself)";
  for (const auto& named : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (is_batch_norm(named.value().get())) return named.key();
  }
  return "";
}

}  // namespace ddpspawn
