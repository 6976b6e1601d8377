// Finds and loads libddpspawn_cuda.so once (see cuda_support.h).
#include "core/comm/cuda/cuda_support.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/env/settings.h"
#include "core/util/files.h"

namespace ddpspawn {
namespace {

std::atomic<bool> loaded{false};

// Where to look, in order (see LoadCudaSupport).
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (std::optional<std::string> named = ReadSetting(Setting::kCudaLibrary);
      named && !named->empty()) {
    paths.emplace_back(*named);
    return paths;
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&LoadCudaSupport), &info) != 0 && info.dli_fname) {
    paths.emplace_back(absl::StrCat(DirectoryOf(info.dli_fname), "/", kCudaSupportLibrary));
  }
  const std::string in_runfiles = absl::StrCat("/ddpspawn/capi/", kCudaSupportLibrary);
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(variable); dir != nullptr && *dir) {
      paths.emplace_back(absl::StrCat(dir, in_runfiles));
    }
  }
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length > 0) {
    paths.emplace_back(absl::StrCat(std::string(self, length), ".runfiles", in_runfiles));
  }
  paths.emplace_back(kCudaSupportLibrary);  // the loader's search path
  return paths;
}

absl::StatusOr<const CudaSupport*> Load() {
  if (!CudaSupportBuilt()) {
    return absl::UnavailableError(
        "this build of ddpspawn has no CUDA support (it was built against a LibTorch without "
        "CUDA or NCCL); rebuild with DDPSPAWN_LIBTORCH set to a CUDA LibTorch");
  }
  std::vector<std::string> tried;
  for (const std::string& path : Candidates()) {
    const bool bare = !absl::StrContains(path, '/');
    if (!bare && access(path.c_str(), F_OK) != 0) {
      tried.emplace_back(absl::StrCat(path, ": no such file"));
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried.emplace_back(dlerror());
      continue;
    }
    using EntryPoint = const CudaSupport* (*)();
    auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, kCudaSupportEntryPoint));
    if (entry == nullptr) {
      tried.emplace_back(absl::StrCat(path, ": no ", kCudaSupportEntryPoint));
      continue;
    }
    loaded.store(true);
    return entry();
  }
  return absl::UnavailableError(
      absl::StrCat("CUDA was asked for, and ddpspawn's CUDA support (", kCudaSupportLibrary,
                   ") could not be loaded; set DDPSPAWN_CUDA_LIBRARY to its path. Tried: ",
                   absl::StrJoin(tried, "; ")));
}

}  // namespace

bool CudaSupportBuilt() {
#ifdef DDPSPAWN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<const CudaSupport*> LoadCudaSupport() {
  static const auto* result = new absl::StatusOr<const CudaSupport*>(Load());
  return *result;
}

bool CudaSupportLoaded() { return loaded.load(); }

}  // namespace ddpspawn
