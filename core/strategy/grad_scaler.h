// Dynamic loss scaling for float16 mixed precision ("16-mixed"), as torch.amp.GradScaler does it:
// the loss is multiplied by a scale before backward; before the optimizer step the gradients are
// divided by it and checked; a step whose gradients hold an inf or a NaN is skipped and the scale
// shrinks; after `growth_interval` good steps in a row it grows.
//
// Every rank must make the same decision: call Unscale on gradients that are already averaged
// across the ranks (after DDP's all-reduce), so that all ranks see the same values. Not
// thread-safe; one per training loop.
#ifndef DDPSPAWN_CORE_STRATEGY_GRAD_SCALER_H_
#define DDPSPAWN_CORE_STRATEGY_GRAD_SCALER_H_

#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace ddpspawn {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, torch's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct GradScalerState {
  double scale = 0;            // 0: no scaler (checkpoints without one)
  int64_t growth_tracker = 0;  // good steps in a row since the last change
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale.
  at::Tensor Scale(const at::Tensor& loss) const;
  // Divides every defined gradient of `parameters` by the scale; false when any of them holds an
  // inf or a NaN (then skip the optimizer step).
  bool Unscale(const std::vector<at::Tensor>& parameters) const;
  // After each optimizer step (taken or skipped): adjusts the scale.
  void Update(bool found_non_finite);

  double scale() const { return state_.scale; }
  const GradScalerState& state() const { return state_; }
  // Restores a checkpoint's state (ignored when its scale is 0).
  void Restore(const GradScalerState& state);

 private:
  GradScalerOptions options_;
  GradScalerState state_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_GRAD_SCALER_H_
