// Dynamic loss scaling (see grad_scaler.h).
#include "core/strategy/grad_scaler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

namespace ddpspawn {

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  state_.scale = options_.init_scale;
}

at::Tensor GradScaler::Scale(const at::Tensor& loss) const { return loss * state_.scale; }

bool GradScaler::Unscale(const std::vector<at::Tensor>& parameters) const {
  // ATen's fused kernel (what torch.amp.GradScaler uses): one launch per device and dtype unscales
  // every gradient and raises a flag on an inf or a NaN; one host sync per group reads the flag.
  std::vector<std::vector<at::Tensor>> groups;  // same device and dtype
  for (const at::Tensor& p : parameters) {
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    auto group = std::find_if(groups.begin(), groups.end(), [&](auto& g) {
      return g[0].device() == grad.device() && g[0].scalar_type() == grad.scalar_type();
    });
    if (group == groups.end()) {
      groups.push_back({grad});
    } else {
      group->push_back(grad);
    }
  }
  bool finite = true;
  for (std::vector<at::Tensor>& grads : groups) {
    const at::TensorOptions options =
        at::TensorOptions().device(grads[0].device()).dtype(at::kFloat);
    at::Tensor found_inf = at::zeros({1}, options);
    const at::Tensor inverse = at::full({1}, 1.0 / state_.scale, options);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inverse);
    finite = finite && found_inf.item<float>() == 0.0f;
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
