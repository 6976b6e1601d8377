// CUDA support is a library of its own, loaded on first use: before that this process maps none of
// CUDA's big libraries; loading it maps libtorch_cuda; a named path that does not exist is an error
// that names it.
#include "core/comm/cuda/cuda_support.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// The CUDA libraries of this process's memory map that a CPU-only process must not load (the CUDA
// wheel's libtorch_cpu itself needs the small CUDA runtime and CUPTI; those are left out).
std::string HeavyCudaMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  for (const char* name : {"libtorch_cuda", "libc10_cuda", "libnccl", "libcudnn", "libcublas"}) {
    maps.clear();
    maps.seekg(0);
    while (std::getline(maps, line)) {
      if (absl::StrContains(line, name)) {
        found += line.substr(line.rfind(' ') + 1) + "\n";
        break;
      }
    }
  }
  return found;
}

TEST(CudaSupportTest, LoadedOnFirstUseOnly) {
  if (!CudaSupportBuilt()) GTEST_SKIP() << "this build has no CUDA support";
  EXPECT_FALSE(CudaSupportLoaded());
  EXPECT_EQ(HeavyCudaMappings(), "") << "mapped before CUDA was asked for";

  absl::StatusOr<const CudaSupport*> cuda = LoadCudaSupport();
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_TRUE(CudaSupportLoaded());
  EXPECT_THAT(HeavyCudaMappings(), HasSubstr("libtorch_cuda.so"));
  EXPECT_GE((*cuda)->DeviceCount(), 0);
  EXPECT_EQ(*LoadCudaSupport(), *cuda) << "loaded once";
}

// In a process of its own (the first load decides for the whole process): threadsafe death tests
// run the statement in a fresh run of this program.
TEST(CudaSupportDeathTest, AMissingLibraryIsNamed) {
  if (!CudaSupportBuilt()) GTEST_SKIP() << "this build has no CUDA support";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("DDPSPAWN_CUDA_LIBRARY", "/nonexistent/libddpspawn_cuda.so", 1);
        std::cerr << LoadCudaSupport().status().message() << std::endl;
        std::exit(CudaSupportLoaded() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0),
      "could not be loaded.*Tried: /nonexistent/libddpspawn_cuda.so: no such file");
}

}  // namespace
}  // namespace ddpspawn
