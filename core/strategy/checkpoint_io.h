// CheckpointIO: where a strategy's checkpoints go. The default writes atomically (temporary file,
// fsync, rename), so a crash never leaves a torn checkpoint behind.
#ifndef DDPSPAWN_CORE_STRATEGY_CHECKPOINT_IO_H_
#define DDPSPAWN_CORE_STRATEGY_CHECKPOINT_IO_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// Thread-safety: the default keeps no state, so any thread may call it (two saves to one path: the
// last rename wins); a strategy calls its own from its one thread. Ownership: shared (shared_ptr)
// by the strategies given it; it keeps no file open between calls.
class CheckpointIO {
 public:
  virtual ~CheckpointIO() = default;
  virtual absl::Status Save(absl::string_view bytes, const std::string& path) = 0;
  virtual absl::StatusOr<std::string> Load(const std::string& path) = 0;
  virtual absl::Status Remove(const std::string& path) = 0;
};

std::shared_ptr<CheckpointIO> MakeAtomicFileCheckpointIO();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_CHECKPOINT_IO_H_
