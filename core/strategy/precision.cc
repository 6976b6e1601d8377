// Precision plugins (see precision.h).
#include "core/strategy/precision.h"

#include <ATen/autocast_mode.h>

#include "absl/strings/str_cat.h"

namespace ddpspawn {
namespace {

class FullPrecision : public PrecisionPlugin {
 public:
  std::string name() const override { return "32-true"; }
  std::unique_ptr<StepContext> TrainStepContext() override {
    return std::make_unique<StepContext>();
  }
};

// CPU autocast to bfloat16 for the duration of a step; restores the previous
// state after.
class Bf16Autocast : public PrecisionPlugin::StepContext {
 public:
  Bf16Autocast()
      : was_enabled_(at::autocast::is_cpu_enabled()),
        previous_dtype_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~Bf16Autocast() override {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }

 private:
  bool was_enabled_;
  at::ScalarType previous_dtype_;
};

class Bf16Mixed : public PrecisionPlugin {
 public:
  std::string name() const override { return "bf16-mixed"; }
  std::unique_ptr<StepContext> TrainStepContext() override {
    return std::make_unique<Bf16Autocast>();
  }
};

}  // namespace

absl::StatusOr<std::shared_ptr<PrecisionPlugin>> MakePrecisionPlugin(
    const std::string& name) {
  if (name.empty() || name == "32-true" || name == "32") {
    return std::shared_ptr<PrecisionPlugin>(std::make_shared<FullPrecision>());
  }
  if (name == "bf16-mixed")
    return std::shared_ptr<PrecisionPlugin>(std::make_shared<Bf16Mixed>());
  if (name == "16-mixed") {
    return absl::UnavailableError(
        "precision '16-mixed' needs CUDA (float16 autocast); on CPU use "
        "'bf16-mixed'");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name,
                   "'; expected '32-true', 'bf16-mixed' or '16-mixed'"));
}

}  // namespace ddpspawn
