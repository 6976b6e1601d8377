// Dynamic loss scaling (see grad_scaler.h).
#include "core/strategy/grad_scaler.h"

#include <ATen/ATen.h>

namespace ddpspawn {

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  state_.scale = options_.init_scale;
}

at::Tensor GradScaler::Scale(const at::Tensor& loss) const {
  return loss * state_.scale;
}

bool GradScaler::Unscale(const std::vector<at::Tensor>& parameters) const {
  const double inverse = 1.0 / state_.scale;
  bool finite = true;
  for (const at::Tensor& p : parameters) {
    at::Tensor grad = p.grad();
    if (!grad.defined()) continue;
    grad.mul_(inverse);
    // One host sync per tensor; the float16 models this serves have few.
    finite = finite && grad.isfinite().all().item<bool>();
  }
  return finite;
}

void GradScaler::Update(bool found_non_finite) {
  if (found_non_finite) {
    state_.scale *= options_.backoff_factor;
    state_.growth_tracker = 0;
    return;
  }
  if (++state_.growth_tracker >= options_.growth_interval) {
    state_.scale *= options_.growth_factor;
    state_.growth_tracker = 0;
  }
}

void GradScaler::Restore(const GradScalerState& state) {
  if (state.scale > 0) state_ = state;
}

}  // namespace ddpspawn
