// What this build of ddpspawn is: its version, the LibTorch, CUDA and NCCL it
// was compiled against, and the process-group backends compiled in. Thread-safe
// (computed once).
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
  std::string nccl_version;   // NCCL loaded at run time, e.g. "2.28.9"; "none"
  std::string backends;       // compiled in, comma-separated: "gloo,nccl"
  int cuda_devices = 0;       // visible now (0 without CUDA or a GPU)
};

const BuildInfo& GetBuildInfo();

// The build info as "key=value" lines (version, torch, cuda, nccl, backends,
// cuda_devices), each ending in a newline.
const std::string& BuildInfoText();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_VERSION_BUILD_INFO_H_
