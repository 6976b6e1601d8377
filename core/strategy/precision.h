// Precision plugins, Lightning's names: "32-true" (nothing to do), "bf16-mixed" (autocast to
// bfloat16 on the model's device, CPU or CUDA) and "16-mixed" (CUDA autocast to float16 with
// dynamic loss scaling; CUDA only). A plugin gives the context each step's forward runs in, and its
// loss scaler if it has one (DDPSpawnStrategy::Backward and OptimizerStep use it). Not thread-safe:
// one plugin per training loop. Ownership: a plugin owns its loss scaler, which grad_scaler()
// lends.
#ifndef DDPSPAWN_CORE_STRATEGY_PRECISION_H_
#define DDPSPAWN_CORE_STRATEGY_PRECISION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/strategy/grad_scaler.h"

namespace ddpspawn {

class PrecisionPlugin {
 public:
  // Ends the step's precision context when destroyed. It sets LibTorch's thread-local autocast
  // state: destroy it on the thread that made it, innermost first.
  class StepContext {
   public:
    virtual ~StepContext() = default;
  };
  virtual ~PrecisionPlugin() = default;
  virtual std::string name() const = 0;
  // The context every step's forward runs in (training, validation, test and predict, as
  // Lightning's precision plugins); `cuda`: the model lives on a CUDA device (else on the CPU).
  virtual std::unique_ptr<StepContext> ForwardContext(bool cuda) = 0;
  // Whether this precision can run on that device.
  virtual bool SupportsDevice(bool /*cuda*/) const { return true; }
  // The loss scaler ("16-mixed"), or null.
  virtual GradScaler* grad_scaler() { return nullptr; }
};

// Lightning's precision settings, named "32-true", "bf16-mixed" and "16-mixed".
enum class Precision { k32True, kBf16Mixed, k16Mixed };
absl::string_view PrecisionName(Precision precision);
// Also "32" for "32-true"; anything else is InvalidArgument.
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);

std::shared_ptr<PrecisionPlugin> MakePrecisionPlugin(Precision precision);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_PRECISION_H_
