// The atomic file CheckpointIO (see checkpoint_io.h).
#include "core/strategy/checkpoint_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/model/sharded_checkpoint.h"
#include "core/util/files.h"

namespace ddpspawn {
namespace {

class AtomicFileCheckpointIO : public CheckpointIO {
 public:
  absl::Status Save(absl::string_view bytes, const std::string& path) override {
    return WriteFileAtomically(path, bytes, /*durable=*/true);
  }
  absl::StatusOr<std::string> Load(const std::string& path) override { return ReadWholeFile(path); }
  absl::Status Remove(const std::string& path) override {
    if (IsShardedCheckpoint(path)) {  // a directory of shards (sharded_checkpoint.h)
      std::error_code error;
      std::filesystem::remove_all(path, error);
      if (error) {
        return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", error.message()));
      }
      return absl::OkStatus();
    }
    if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::shared_ptr<CheckpointIO> MakeAtomicFileCheckpointIO() {
  return std::make_shared<AtomicFileCheckpointIO>();
}

}  // namespace ddpspawn
