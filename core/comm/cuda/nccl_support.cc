// CudaSupport's implementation, the one part of ddpspawn that links libtorch_cuda: built as
// libddpspawn_cuda.so (capi/BUILD.bazel) and loaded by LoadCudaSupport (cuda_support.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdio>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "core/comm/cuda/cuda_support.h"

namespace ddpspawn {
namespace {

class NcclSupport final : public CudaSupport {
 public:
  int DeviceCount() const override { return static_cast<int>(c10::cuda::device_count()); }

  void SetDevice(int index) const override {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  }

  std::string DeviceUuid(int index) const override {
    const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
    std::string uuid;
    for (unsigned char byte : props->uuid.bytes) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", byte);
      uuid += hex;
    }
    return uuid;
  }

  c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
      std::chrono::milliseconds timeout) const override {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
  }
};

}  // namespace
}  // namespace ddpspawn

extern "C" __attribute__((visibility("default"))) const ddpspawn::CudaSupport*
ddpspawn_cuda_support_v1() {
  static const ddpspawn::NcclSupport support;
  return &support;
}
