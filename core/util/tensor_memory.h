// A count of the bytes that CPU tensors hold, for measuring what training keeps per rank: once
// installed, LibTorch's CPU allocator is replaced by one that counts every block it hands out and
// takes back, and memory that tensors hold outside it (the shared-memory gradient buckets) is
// counted by whoever maps it. Live bytes and their high-water mark.
#ifndef DDPSPAWN_CORE_UTIL_TENSOR_MEMORY_H_
#define DDPSPAWN_CORE_UTIL_TENSOR_MEMORY_H_

#include <cstdint>

namespace ddpspawn {

// Makes the counting allocator LibTorch's CPU allocator, once per process (later calls do nothing).
// Tensors allocated before keep their own deleters and are never counted. While it is installed,
// the torch profiler sees no CPU allocations. Thread-safe, as every function here.
void InstallTensorMemoryCounter();
bool TensorMemoryCounterInstalled();

// Bytes counted now (the allocator's blocks, without its 64-byte headers, and external memory).
int64_t LiveTensorBytes();
// LiveTensorBytes() once it has stopped changing for 50 ms (waiting at most 2 s): a backend's
// worker thread may drop its references to a collective's tensors a little after the collective
// returns. For measuring what stays between steps.
int64_t SettledLiveTensorBytes();
// The most LiveTensorBytes() has been since the last ResetPeakTensorBytes() (or the process start);
// ResetPeakTensorBytes() sets it to the live bytes.
int64_t PeakTensorBytes();
void ResetPeakTensorBytes();

// Memory that tensors hold outside the allocator: `bytes` when it is mapped, minus as much when it
// is released. Counted whether or not the allocator is installed.
void CountExternalTensorBytes(int64_t bytes);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_TENSOR_MEMORY_H_
