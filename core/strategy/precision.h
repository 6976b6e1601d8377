// Precision plugins: "32-true" (nothing to do) and "bf16-mixed" (CPU autocast
// to bfloat16); "16-mixed" needs CUDA. A plugin gives the context a training
// step runs in.
#ifndef DDPSPAWN_CORE_STRATEGY_PRECISION_H_
#define DDPSPAWN_CORE_STRATEGY_PRECISION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ddpspawn {

class PrecisionPlugin {
 public:
  // Ends the step's precision context when destroyed.
  class StepContext {
   public:
    virtual ~StepContext() = default;
  };
  virtual ~PrecisionPlugin() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<StepContext> TrainStepContext() = 0;
};

// "32-true", "bf16-mixed"; "16-mixed" only with a CUDA build (else
// Unavailable).
absl::StatusOr<std::shared_ptr<PrecisionPlugin>> MakePrecisionPlugin(
    const std::string& name);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_PRECISION_H_
