// The FileStore with prompt waits (see prompt_file_store.h).
#include "core/comm/prompt_file_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_join.h"
#include "core/env/run_dir.h"

namespace ddpspawn {
namespace {

// FileStore only creates its file on the first write, and a check before that blocks (holding the
// store's lock) until the file appears: create it first.
c10::intrusive_ptr<c10d::FileStore> OpenFileStore(const std::string& path, int world_size) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
  return c10::make_intrusive<c10d::FileStore>(path, world_size);
}

}  // namespace

PromptFileStore::PromptFileStore(const std::string& path, int world_size)
    : file_(OpenFileStore(path, world_size)) {}

PromptFileStore::PromptFileStore(c10::intrusive_ptr<c10d::FileStore> file)
    : file_(std::move(file)) {}

c10::intrusive_ptr<c10d::Store> PromptFileStore::clone() {
  auto file = c10::static_intrusive_pointer_cast<c10d::FileStore>(file_->clone());
  return c10::make_intrusive<PromptFileStore>(std::move(file));
}

void PromptFileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  file_->set(key, value);
}

std::vector<uint8_t> PromptFileStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  return file_->compareSet(key, expected, desired);
}

std::vector<uint8_t> PromptFileStore::get(const std::string& key) {
  wait({key});  // FileStore::get would poll at 10 ms
  return file_->get(key);
}

int64_t PromptFileStore::add(const std::string& key, int64_t value) {
  return file_->add(key, value);
}

bool PromptFileStore::deleteKey(const std::string& key) { return file_->deleteKey(key); }

bool PromptFileStore::check(const std::vector<std::string>& keys) { return file_->check(keys); }

int64_t PromptFileStore::getNumKeys() { return file_->getNumKeys(); }

void PromptFileStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void PromptFileStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  const auto start = std::chrono::steady_clock::now();
  // Short pauses first (the peers are usually a moment behind), then up to 1 ms, so that a long
  // wait does not take a core from the ranks that work.
  std::chrono::microseconds pause(50);
  const std::string abandoned = AbandonedStoreMarker(file_->getPath());
  while (!file_->check(keys)) {
    TORCH_CHECK(timeout == kNoTimeout || std::chrono::steady_clock::now() - start < timeout,
                "Wait timeout after ", timeout.count(), " ms for keys ", absl::StrJoin(keys, ", "));
    TORCH_CHECK(access(abandoned.c_str(), F_OK) != 0,
                "the launcher gave up on this group: a rank it was forming with was lost (waiting "
                "for keys ",
                absl::StrJoin(keys, ", "), ")");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void PromptFileStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  file_->setTimeout(timeout);
}

}  // namespace ddpspawn
