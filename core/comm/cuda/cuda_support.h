// What ddpspawn does with CUDA and NCCL, behind an interface whose implementation lives in a
// library of its own, libddpspawn_cuda.so (cuda/nccl_support.cc). It is loaded the first time a
// CUDA device or the nccl backend is asked for, so a CPU-only process never maps libtorch_cuda,
// NCCL, cuDNN or cuBLAS (as PyTorch registers CUDA only when libtorch_cuda loads; the CUDA wheel's
// libtorch_cpu itself still needs the small CUDA runtime and CUPTI).
#ifndef DDPSPAWN_CORE_COMM_CUDA_CUDA_SUPPORT_H_
#define DDPSPAWN_CORE_COMM_CUDA_CUDA_SUPPORT_H_

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"

namespace ddpspawn {

// Thread safety: the methods may be called from any thread (each is one CUDA or c10d call).
// Ownership: the loaded library owns the one instance, which lives until the process exits.
class CudaSupport {
 public:
  virtual ~CudaSupport() = default;
  // CUDA devices this process sees.
  virtual int DeviceCount() const = 0;
  // Makes `index` this thread's current device.
  virtual void SetDevice(int index) const = 0;
  // The device's UUID as hexadecimal text (two ranks with the same one share a GPU).
  virtual std::string DeviceUuid(int index) const = 0;
  // A c10d NCCL backend of `world_size` ranks over `store`, each collective limited to `timeout`.
  virtual c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
      std::chrono::milliseconds timeout) const = 0;
};

// The name of the entry point libddpspawn_cuda.so exports: a function with no arguments that
// returns the CudaSupport* (never null).
inline constexpr char kCudaSupportEntryPoint[] = "ddpspawn_cuda_support_v1";
// The library's file name.
inline constexpr char kCudaSupportLibrary[] = "libddpspawn_cuda.so";

// True when this build has CUDA support (a CUDA LibTorch with NCCL); whether it loads is
// LoadCudaSupport's to say.
bool CudaSupportBuilt();

// Loads libddpspawn_cuda.so on the first call (later calls return the same result), from the first
// of: $DDPSPAWN_CUDA_LIBRARY (a full path); the folder of the library or program that holds this
// code; Bazel's runfiles of this program (capi/); the loader's search path. Unavailable, with each
// place tried and why, when this build has no CUDA support or the library cannot be loaded.
// Thread-safe.
absl::StatusOr<const CudaSupport*> LoadCudaSupport();

// Whether this process has loaded it (never loads).
bool CudaSupportLoaded();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_CUDA_CUDA_SUPPORT_H_
