// The shared-memory all-reduce (see shm_allreduce.h).
#include "core/dist/shm_allreduce.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ddpspawn {

// At the start of the segment, per rank: the last generation it arrived at and
// departed from, and its pid (to notice a rank that died instead of waiting for
// it until the timeout).
struct SharedMemoryAllReduce::Header {
  std::atomic<uint64_t> arrived[kMaxRanks];
  std::atomic<uint64_t> departed[kMaxRanks];
  std::atomic<int64_t> pid[kMaxRanks];
};

namespace {

constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(SharedMemoryAllReduce::Header) <= 4096,
              "header too large");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "needs lock-free atomics");

// False once the process is gone (or a zombie waiting to be reaped).
bool Alive(int64_t pid) {
  if (pid <= 0) return true;  // not registered yet
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ||
         line[close + 2] != 'Z';
}

}  // namespace

SharedMemoryAllReduce::SharedMemoryAllReduce(std::string name, int rank,
                                             int world_size, size_t capacity,
                                             absl::Duration timeout, void* base,
                                             size_t mapped)
    : name_(std::move(name)),
      rank_(rank),
      world_size_(world_size),
      capacity_(capacity),
      timeout_(timeout),
      base_(base),
      mapped_(mapped) {}

SharedMemoryAllReduce::~SharedMemoryAllReduce() {
  munmap(base_, mapped_);
  shm_unlink(
      name_
          .c_str());  // the last one to leave removes it; ENOENT for the others
}

absl::StatusOr<std::unique_ptr<SharedMemoryAllReduce>>
SharedMemoryAllReduce::Create(const std::string& name, int rank, int world_size,
                              size_t capacity_bytes, absl::Duration timeout) {
  if (world_size > kMaxRanks) {
    return absl::UnavailableError(
        absl::StrCat("more than ", kMaxRanks, " ranks"));
  }
  const std::string shm_name = "/" + name;
  const size_t slot = (capacity_bytes + 63) / 64 * 64;
  const size_t bytes = kHeaderBytes + slot * static_cast<size_t>(world_size);
  int fd = shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("shm_open(", shm_name, "): ", std::strerror(errno)));
  }
  // Every rank sets the same size; the pages start zeroed (the counters at 0).
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int saved = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("ftruncate(", shm_name, "): ", std::strerror(saved)));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("mmap(", shm_name, "): ", std::strerror(errno)));
  }
  static_cast<Header*>(base)->pid[rank].store(getpid(),
                                              std::memory_order_release);
  return std::unique_ptr<SharedMemoryAllReduce>(new SharedMemoryAllReduce(
      shm_name, rank, world_size, slot, timeout, base, bytes));
}

absl::Status SharedMemoryAllReduce::WaitUntil(const char* what, uint64_t target,
                                              bool arrived) {
  auto* header = static_cast<Header*>(base_);
  std::atomic<uint64_t>* counters =
      arrived ? header->arrived : header->departed;
  const absl::Time deadline = absl::Now() + timeout_;
  for (int r = 0; r < world_size_; ++r) {
    for (int spin = 0; counters[r].load(std::memory_order_acquire) < target;
         ++spin) {
      if (spin < 200) continue;
      if (spin < 2000) {
        sched_yield();
        continue;
      }
      if ((spin & 1023) == 0) {
        const int64_t pid = header->pid[r].load(std::memory_order_acquire);
        if (!Alive(pid)) {
          return absl::InternalError(absl::StrCat(
              "shared-memory all_reduce: rank ", r, " (pid ", pid,
              ") exited while the others waited for it to ", what));
        }
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("shared-memory all_reduce: timed out after ",
                           absl::FormatDuration(timeout_), " waiting for rank ",
                           r, " to ", what));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status SharedMemoryAllReduce::Sum(T* data, size_t count) {
  const size_t bytes = count * sizeof(T);
  if (bytes > capacity_) {
    return absl::InvalidArgumentError(
        "buffer larger than the shared-memory slots");
  }
  auto* header = static_cast<Header*>(base_);
  char* slots = static_cast<char*>(base_) + kHeaderBytes;
  // Our slot may still be read for the previous generation: wait until everyone
  // left it.
  if (absl::Status s =
          WaitUntil("finish the previous all_reduce", generation_, false);
      !s.ok()) {
    return s;
  }
  ++generation_;
  std::memcpy(slots + rank_ * capacity_, data, bytes);
  header->arrived[rank_].store(generation_, std::memory_order_release);
  if (absl::Status s = WaitUntil("arrive", generation_, true); !s.ok()) {
    return s;
  }
  // Sum in rank order, so that every rank computes the same bits.
  const T* first = reinterpret_cast<const T*>(slots);
  std::memcpy(data, first, bytes);
  for (int r = 1; r < world_size_; ++r) {
    const T* other = reinterpret_cast<const T*>(slots + r * capacity_);
    for (size_t i = 0; i < count; ++i) data[i] += other[i];
  }
  header->departed[rank_].store(generation_, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status SharedMemoryAllReduce::SumFloat(float* data, size_t count) {
  return Sum(data, count);
}

absl::Status SharedMemoryAllReduce::SumDouble(double* data, size_t count) {
  return Sum(data, count);
}

}  // namespace ddpspawn
