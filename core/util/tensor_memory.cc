// The counting CPU allocator and the live and peak counts (see tensor_memory.h).
#include "core/util/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <thread>

namespace ddpspawn {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<bool> installed{false};

void Count(int64_t bytes) {
  const int64_t now = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Each block is preceded by a header that holds its size, as wide as LibTorch's alignment, so the
// data keeps the default allocator's alignment and the deleter needs no context.
constexpr size_t kHeader = 64;

void DeleteCounted(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  size_t size = 0;
  std::memcpy(&size, base, sizeof(size));
  Count(-static_cast<int64_t>(size));
  c10::free_cpu(base);
}

// Thread-safe (the counts are atomic); lives for the rest of the process once installed.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    std::memcpy(base, &n, sizeof(n));
    Count(static_cast<int64_t>(n));
    void* data = base + kHeader;
    return {data, data, &DeleteCounted, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &DeleteCounted; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

void InstallTensorMemoryCounter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingCpuAllocator* allocator = new CountingCpuAllocator();  // never freed: see above
    // A priority above the default allocator's, which registered with 0.
    c10::SetCPUAllocator(allocator, /*priority=*/1);
    installed = true;
  });
}

bool TensorMemoryCounterInstalled() { return installed; }

int64_t LiveTensorBytes() { return live_bytes.load(std::memory_order_relaxed); }

int64_t PeakTensorBytes() { return peak_bytes.load(std::memory_order_relaxed); }

void ResetPeakTensorBytes() { peak_bytes.store(LiveTensorBytes(), std::memory_order_relaxed); }

void CountExternalTensorBytes(int64_t bytes) { Count(bytes); }

int64_t SettledLiveTensorBytes() {
  int64_t last = LiveTensorBytes();
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t now = LiveTensorBytes();
    if (now == last) return now;
    last = now;
  }
  return last;
}

}  // namespace ddpspawn
