// The TorchScript adapter (see torchscript_module.h).
#include "core/train/models/torchscript_module.h"

#include <torch/script.h>

#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/model/pickle_sizes.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// kLoss: a Tensor, or a Dict[str, Tensor] with the loss under "loss".
enum class Returns { kTensor, kMetrics, kLoss };

std::string Signature(const std::string& name, Returns returns) {
  return absl::StrCat(name, "(self, batch: List[Tensor], batch_idx: int) -> ",
                      returns == Returns::kTensor ? "Tensor"
                      : returns == Returns::kLoss ? "Tensor (or Dict[str, Tensor] with 'loss')"
                                                  : "Dict[str, Tensor]");
}

bool IsDictOfTensors(const c10::TypePtr& type) {
  auto dict = type->cast<c10::DictType>();
  return dict && dict->getKeyType()->isSubtypeOf(*c10::StringType::get()) &&
         dict->getValueType()->isSubtypeOf(*c10::TensorType::get());
}

// Checks an exported step's schema; NotFound when the module has no such method.
absl::Status CheckStep(const torch::jit::Module& module, const std::string& path,
                       const std::string& name, Returns returns) {
  c10::optional<torch::jit::Method> method = module.find_method(name);
  if (!method) {
    return absl::NotFoundError(
        absl::StrCat(path, ": the TorchScript module has no method '", name, "'; export one with ",
                     "@torch.jit.export and the signature ", Signature(name, returns)));
  }
  const c10::FunctionSchema& schema = method->function().getSchema();
  const auto& args = schema.arguments();
  bool ok = args.size() == 3 && schema.returns().size() == 1 &&
            args[1].type()->isSubtypeOf(*c10::ListType::ofTensors()) &&
            args[2].type()->isSubtypeOf(*c10::IntType::get());
  if (ok) {
    const c10::TypePtr& result = schema.returns()[0].type();
    const bool tensor = result->isSubtypeOf(*c10::TensorType::get());
    ok = returns == Returns::kTensor    ? tensor
         : returns == Returns::kMetrics ? IsDictOfTensors(result)
                                        : tensor || IsDictOfTensors(result);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": '", name, "' has the signature ",
                                                   c10::toString(schema), "; expected ",
                                                   Signature(name, returns)));
  }
  return absl::OkStatus();
}

}  // namespace

struct TorchScriptModule::Impl {
  torch::jit::Module module;
  std::string path;
  bool has_validation = false, has_test = false, has_predict = false;

  std::vector<c10::IValue> Arguments(const Batch& batch, int64_t batch_index) {
    return {c10::IValue(c10::List<at::Tensor>(batch)), c10::IValue(batch_index)};
  }
  absl::StatusOr<StepMetrics> Metrics(const std::string& name, const Batch& batch, int64_t index) {
    return InvalidInputOnException(
        absl::StrCat(name, " failed"), [&]() -> absl::StatusOr<StepMetrics> {
          c10::IValue out = module.get_method(name)(Arguments(batch, index));
          StepMetrics metrics;
          for (const auto& entry : out.toGenericDict()) {
            metrics[entry.key().toStringRef()] = entry.value().toTensor();
          }
          return metrics;
        });
  }
};

TorchScriptModule::TorchScriptModule(std::unique_ptr<Impl> impl, OptimizerConfig optimizer)
    : impl_(std::move(impl)), optimizer_(std::move(optimizer)) {}

TorchScriptModule::~TorchScriptModule() = default;

absl::StatusOr<std::shared_ptr<TorchScriptModule>> TorchScriptModule::Load(
    const std::string& path, const OptimizerConfig& optimizer) {
  if (!std::ifstream(path).good()) {
    return absl::NotFoundError(absl::StrCat("cannot open the model file ", path));
  }
  if (absl::Status sizes = CheckArchiveFilePickles(path); !sizes.ok()) {
    return absl::Status(sizes.code(), absl::StrCat(path, ": ", sizes.message()));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  try {
    impl->module = torch::jit::load(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a TorchScript module: ", ExceptionMessage(e)));
  }
  RETURN_IF_ERROR(CheckStep(impl->module, path, "training_step", Returns::kLoss));
  auto optional_step = [&](const std::string& name, Returns returns, bool* present) {
    absl::Status s = CheckStep(impl->module, path, name, returns);
    *present = s.ok();
    return absl::IsNotFound(s) ? absl::OkStatus() : s;
  };
  if (absl::Status s = optional_step("validation_step", Returns::kMetrics, &impl->has_validation);
      !s.ok()) {
    return s;
  }
  RETURN_IF_ERROR(optional_step("test_step", Returns::kMetrics, &impl->has_test));
  if (absl::Status s = optional_step("predict_step", Returns::kTensor, &impl->has_predict);
      !s.ok()) {
    return s;
  }
  return std::shared_ptr<TorchScriptModule>(new TorchScriptModule(std::move(impl), optimizer));
}

std::vector<at::Tensor> TorchScriptModule::parameters() {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : impl_->module.parameters()) out.push_back(p);
  return out;
}

std::vector<at::Tensor> TorchScriptModule::buffers() {
  std::vector<at::Tensor> out;
  for (const at::Tensor& b : impl_->module.buffers()) out.push_back(b);
  return out;
}

NamedTensors TorchScriptModule::named_state() {
  NamedTensors state;
  for (const auto& item : impl_->module.named_parameters())
    state.emplace_back(item.name, item.value);
  for (const auto& item : impl_->module.named_buffers()) state.emplace_back(item.name, item.value);
  return state;
}

absl::Status TorchScriptModule::To(const c10::Device& device) {
  return InvalidInputOnException("moving the model failed", [&]() -> absl::Status {
    impl_->module.to(device);
    return absl::OkStatus();
  });
}

void TorchScriptModule::SetTraining(bool training) { impl_->module.train(training); }

absl::StatusOr<at::Tensor> TorchScriptModule::TrainingStep(const Batch& batch,
                                                           int64_t batch_index) {
  return InvalidInputOnException("training_step failed", [&]() -> absl::StatusOr<at::Tensor> {
    c10::IValue out =
        impl_->module.get_method("training_step")(impl_->Arguments(batch, batch_index));
    if (out.isTensor()) return out.toTensor();
    // A dict: the loss, and every other entry logged as with Log(name, value, sync_dist=true).
    std::optional<at::Tensor> loss;
    std::string names;
    for (const auto& entry : out.toGenericDict()) {
      const std::string& name = entry.key().toStringRef();
      const at::Tensor value = entry.value().toTensor();
      absl::StrAppend(&names, names.empty() ? "" : ", ", name);
      if (name == "loss") {
        loss = value;
      } else if (value.numel() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(impl_->path, ": training_step's '", name,
                                                       "' has ", value.numel(),
                                                       " elements; a logged value is one number"));
      } else {
        Log(name, value.detach().item<double>(), /*sync_dist=*/true);
      }
    }
    if (!loss.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          impl_->path, ": training_step returned a dict without 'loss' (it has: ", names, ")"));
    }
    return *loss;
  });
}

absl::StatusOr<StepMetrics> TorchScriptModule::ValidationStep(const Batch& batch,
                                                              int64_t batch_index) {
  if (!impl_->has_validation) {
    return absl::FailedPreconditionError(absl::StrCat(
        impl_->path, ": validating needs ", Signature("validation_step", Returns::kMetrics)));
  }
  return impl_->Metrics("validation_step", batch, batch_index);
}

absl::StatusOr<StepMetrics> TorchScriptModule::TestStep(const Batch& batch, int64_t batch_index) {
  if (!impl_->has_test) return ValidationStep(batch, batch_index);
  return impl_->Metrics("test_step", batch, batch_index);
}

absl::StatusOr<at::Tensor> TorchScriptModule::PredictStep(const Batch& batch, int64_t batch_index) {
  if (!impl_->has_predict) {
    return absl::FailedPreconditionError(absl::StrCat(impl_->path, ": predicting needs ",
                                                      Signature("predict_step", Returns::kTensor)));
  }
  return InvalidInputOnException("predict_step failed", [&]() -> absl::StatusOr<at::Tensor> {
    return impl_->module.get_method("predict_step")(impl_->Arguments(batch, batch_index))
        .toTensor();
  });
}

absl::Status TorchScriptModule::Save(const std::string& path) {
  return InvalidInputOnException("saving the TorchScript module failed", [&]() -> absl::Status {
    impl_->module.save(path);
    return absl::OkStatus();
  });
}

}  // namespace ddpspawn
