// What this build of ddpspawn is: its version, the LibTorch, CUDA and NCCL it was compiled against,
// and the process-group backends compiled in. Thread-safe (computed once). It never initialises
// CUDA, so a launcher may ask before forking ranks that use CUDA.
#ifndef DDPSPAWN_CORE_VERSION_BUILD_INFO_H_
#define DDPSPAWN_CORE_VERSION_BUILD_INFO_H_

#include <string>

namespace ddpspawn {

// ddpspawn's own version.
inline constexpr char kVersion[] = "0.1.0";

struct BuildInfo {
  std::string version;        // ddpspawn, e.g. "0.1.0"
  std::string torch_version;  // LibTorch at compile time, e.g. "2.11.0"
  std::string cuda_version;   // CUDA at compile time, e.g. "13.0"; "none"
  std::string nccl_version;   // NCCL built against, e.g. "2.28.9"; "none"
  std::string backends;       // compiled in, comma-separated: "gloo,nccl"
};

const BuildInfo& GetBuildInfo();

// The build info as "key=value" lines (version, torch, cuda, nccl, backends), each ending in a
// newline.
const std::string& BuildInfoText();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_VERSION_BUILD_INFO_H_
