// UnitOrder: the forward order of full_shard's units and the guesses drawn from it (see
// unit_order.h).
#include "core/ddp/unit_order.h"

#include <algorithm>
#include <utility>

namespace ddpspawn {

size_t UnitOrder::NoteForward(size_t unit, int depth) {
  if (done_) {
    last_ = std::move(order_);
    order_.clear();
    depth_.clear();
    done_ = false;
  }
  // Forwards without a backward (grad enabled, never differentiated) start the order afresh rather
  // than growing it without end.
  if (order_.size() >= 16 * std::max<size_t>(unit_count_, 1)) {
    order_.clear();
    depth_.clear();
  }
  order_.push_back(unit);
  depth_.push_back(depth);
  backward_position_ = order_.size();
  const size_t k = order_.size() - 1;
  if (k + 1 < last_.size() && last_[k] == unit && last_[k + 1] != unit) return last_[k + 1];
  return kNone;
}

size_t UnitOrder::NoteBackward(size_t unit) {
  // The latest run of `unit` before where this backward has reached (else the latest anywhere).
  auto latest_before = [&](size_t end) {
    for (size_t p = std::min(end, order_.size()); p-- > 0;) {
      if (order_[p] == unit) return p;
    }
    return kNone;
  };
  size_t found = latest_before(backward_position_);
  if (found == kNone) found = latest_before(order_.size());
  if (found == kNone) return kNone;
  if (found + 1 < order_.size() && depth_[found + 1] > depth_[found]) return kNone;  // a wrapper
  backward_position_ = found;
  return found == 0 ? kNone : order_[found - 1];
}

}  // namespace ddpspawn
