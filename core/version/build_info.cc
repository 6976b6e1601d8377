// The build's versions (see build_info.h).
#include "core/version/build_info.h"

#include <torch/version.h>

#include "absl/strings/str_cat.h"

#ifdef DDPSPAWN_WITH_CUDA
// Headers only: the versions are the build's (nothing here loads CUDA).
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace ddpspawn {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo* info = [] {
    auto* b = new BuildInfo;
    b->version = kVersion;
    b->torch_version = TORCH_VERSION;
    b->cuda_version = "none";
    b->nccl_version = "none";
    b->backends = "gloo";
#ifdef DDPSPAWN_WITH_CUDA
    b->cuda_version = absl::StrCat(CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10);
    b->nccl_version = absl::StrCat(NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH);
    b->backends = "gloo,nccl";
#endif
    return b;
  }();
  return *info;
}

const std::string& BuildInfoText() {
  static const std::string* text = [] {
    const BuildInfo& b = GetBuildInfo();
    return new std::string(absl::StrCat("version=", b.version, "\ntorch=", b.torch_version,
                                        "\ncuda=", b.cuda_version, "\nnccl=", b.nccl_version,
                                        "\nbackends=", b.backends, "\n"));
  }();
  return *text;
}

}  // namespace ddpspawn
