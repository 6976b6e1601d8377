// The atomic file CheckpointIO (see checkpoint_io.h).
#include "core/strategy/checkpoint_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
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
