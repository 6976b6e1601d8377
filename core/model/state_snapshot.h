// StateSnapshot: what a checkpoint holds (a module's parameters and buffers, its optimizer's state,
// where training stands), kept as copies of the tensors in memory instead of serialized bytes: an
// elastic fit's commit, taken every few steps, restored into the same module and an optimizer over
// the same parameters. Copying costs a memcpy of the state; SerializeCheckpoint's pickling and zip
// cost many times that. The optimizer states of LibTorch's SGD, Adam, AdamW, RMSprop and Adagrad
// are copied tensor by tensor; any other optimizer's state is serialized (its own save()).
#ifndef DDPSPAWN_CORE_MODEL_STATE_SNAPSHOT_H_
#define DDPSPAWN_CORE_MODEL_STATE_SNAPSHOT_H_

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/checkpoint.h"
#include "core/model/module.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

// Immutable once taken, so thread-safe to read; copies share the same tensors (cheap to copy).
// Restore copies into the tensors the optimizer already holds where shapes match.
class StateSnapshot {
 public:
  // Copies `module`'s named state, `optimizer`'s state and options (it may be null: model only) and
  // `state`. The copies live on the tensors' own devices. `recycled`, a snapshot no longer needed,
  // lends its memory to the copies when no other copy of it is held (a commit taken every few steps
  // allocates nothing after the first).
  static absl::StatusOr<StateSnapshot> Take(LightningModule& module,
                                            torch::optim::Optimizer* optimizer, TrainingState state,
                                            std::optional<StateSnapshot> recycled = std::nullopt);

  // Puts the snapshot back: the module's tensors (by name, same shapes), the optimizer's options
  // and per-parameter state (by position in its parameter groups, as LibTorch's serialization does)
  // and `state` (when not null). The snapshot stays as it was, to restore again. A module or
  // optimizer of another shape than the one taken is an error that names the difference.
  absl::Status Restore(LightningModule& module, torch::optim::Optimizer* optimizer,
                       TrainingState* state) const;

  const TrainingState& training_state() const;
  // The module's tensors as copied, by name.
  const NamedTensors& weights() const;
  // Whether the optimizer's state was serialized (an optimizer other than LibTorch's five).
  bool optimizer_serialized() const;

 private:
  struct Contents;
  explicit StateSnapshot(std::shared_ptr<Contents> contents);
  std::shared_ptr<Contents> contents_;  // never changed once taken (but when recycled)
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_STATE_SNAPSHOT_H_
