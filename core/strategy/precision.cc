// Precision plugins (see precision.h).
#include "core/strategy/precision.h"

#include <ATen/autocast_mode.h>

#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"

namespace ddpspawn {
namespace {

class FullPrecision : public PrecisionPlugin {
 public:
  std::string name() const override { return std::string(PrecisionName(Precision::k32True)); }
  std::unique_ptr<StepContext> ForwardContext(bool) override {
    return std::make_unique<StepContext>();
  }
};

// Autocast to `dtype` on one device type for the duration of a step; restores the previous state
// after.
class Autocast : public PrecisionPlugin::StepContext {
 public:
  Autocast(c10::DeviceType device, at::ScalarType dtype)
      : device_(device),
        was_enabled_(at::autocast::is_autocast_enabled(device)),
        previous_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() override {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
  }

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  at::ScalarType previous_dtype_;
};

class Bf16Mixed : public PrecisionPlugin {
 public:
  std::string name() const override { return std::string(PrecisionName(Precision::kBf16Mixed)); }
  std::unique_ptr<StepContext> ForwardContext(bool cuda) override {
    return std::make_unique<Autocast>(cuda ? c10::kCUDA : c10::kCPU, at::kBFloat16);
  }
};

class Fp16Mixed : public PrecisionPlugin {
 public:
  std::string name() const override { return std::string(PrecisionName(Precision::k16Mixed)); }
  std::unique_ptr<StepContext> ForwardContext(bool) override {
    return std::make_unique<Autocast>(c10::kCUDA, at::kHalf);
  }
  bool SupportsDevice(bool cuda) const override { return cuda; }
  GradScaler* grad_scaler() override { return &scaler_; }

 private:
  GradScaler scaler_;
};

}  // namespace

constexpr NamedValue<Precision> kPrecisionNames[] = {
    {"32-true", Precision::k32True},
    {"bf16-mixed", Precision::kBf16Mixed},
    {"16-mixed", Precision::k16Mixed},
    {"32", Precision::k32True},
};

absl::string_view PrecisionName(Precision precision) { return NameOf(kPrecisionNames, precision); }

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  return ParseName(kPrecisionNames, "precision", name);
}

std::shared_ptr<PrecisionPlugin> MakePrecisionPlugin(Precision precision) {
  switch (precision) {
    case Precision::kBf16Mixed:
      return std::make_shared<Bf16Mixed>();
    case Precision::k16Mixed:
      return std::make_shared<Fp16Mixed>();
    case Precision::k32True:
      break;
  }
  return std::make_shared<FullPrecision>();
}

}  // namespace ddpspawn
