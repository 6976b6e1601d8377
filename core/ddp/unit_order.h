// UnitOrder: the order in which full_shard's units ran their forward, kept to guess which unit's
// all-gather to start ahead (FSDP's prefetch): in forward the one that came next in the last
// complete forward, in backward the one that ran before in this forward.
#ifndef DDPSPAWN_CORE_DDP_UNIT_ORDER_H_
#define DDPSPAWN_CORE_DDP_UNIT_ORDER_H_

#include <cstddef>
#include <vector>

namespace ddpspawn {

// Thread-compatible: FullShard calls it under its own mutex. Owns only its vectors.
class UnitOrder {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  explicit UnitOrder(size_t unit_count) : unit_count_(unit_count) {}

  // A training forward runs `unit` inside `depth` other units' forwards (a root unit wraps the
  // others). Returns the unit that came right after it in the last complete forward, if this
  // forward has followed that one so far; else kNone.
  size_t NoteForward(size_t unit, int depth);
  // This backward reached `unit` (its output's gradient arrived). Returns the unit that ran just
  // before it in this forward, its backward's likely successor; kNone for the first, and for a unit
  // whose forward wrapped the ones after it (their backwards come first).
  size_t NoteBackward(size_t unit);
  // A backward ended: this forward's order is the last complete one, and the next forward starts a
  // new one.
  void EndBackward() { done_ = true; }

 private:
  size_t unit_count_;
  std::vector<size_t> order_;  // this forward's units, in the order they ran
  std::vector<int> depth_;     // each one's depth
  std::vector<size_t> last_;   // the last complete forward's order
  bool done_ = false;
  size_t backward_position_ = 0;  // where this backward has reached in order_
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_UNIT_ORDER_H_
