// Collectives through shared memory (see shm_collectives.h).
#include "core/comm/shm_collectives.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ddpspawn {

// At the start of the staging segment, per rank: the last generation it
// arrived at (its slot is ready) and left (it is done with the others' slots),
// and its pid (to notice a rank that died instead of waiting until the
// timeout).
struct SharedMemoryCollectives::Header {
  std::atomic<uint64_t> arrived[kMaxRanks];
  std::atomic<uint64_t> left[kMaxRanks];
  std::atomic<int64_t> pid[kMaxRanks];
};

// One mapped /dev/shm segment: an optional header, then one slot per rank.
// Unmapped (and unlinked: the first rank to let go removes the name) when the
// last reference goes.
struct SharedMemoryCollectives::Segment {
  std::string name;
  char* base = nullptr;
  size_t mapped = 0, header_bytes = 0, slot_bytes = 0;

  char* slot(int rank) const { return base + header_bytes + rank * slot_bytes; }
  ~Segment() {
    munmap(base, mapped);
    shm_unlink(name.c_str());  // ENOENT for all but the first
  }
};

namespace {

constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(SharedMemoryCollectives::Header) <= kHeaderBytes, "header too large");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "needs lock-free atomics");

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Opens (or creates) and maps `name`. With `reserve`, the pages are allocated
// now, so that a full /dev/shm is an error here rather than a SIGBUS later.
absl::StatusOr<std::shared_ptr<SharedMemoryCollectives::Segment>> MapSegment(
    const std::string& name, size_t header_bytes, size_t slot_bytes, int world_size, bool reserve) {
  auto segment = std::make_shared<SharedMemoryCollectives::Segment>();
  segment->header_bytes = header_bytes;
  segment->slot_bytes = slot_bytes;
  segment->mapped = header_bytes + slot_bytes * static_cast<size_t>(world_size);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("shm_open(", name, "): ", std::strerror(errno)));
  }
  segment->name = name;  // from here on the destructor unlinks it
  // Every rank sets the same size; new pages read as zeros.
  int error = ftruncate(fd, static_cast<off_t>(segment->mapped)) == 0 ? 0 : errno;
  if (error == 0 && reserve) error = posix_fallocate(fd, 0, static_cast<off_t>(segment->mapped));
  if (error != 0) {
    close(fd);
    shm_unlink(name.c_str());
    segment->name.clear();
    return absl::UnavailableError(absl::StrCat("sizing ", name, " to ", segment->mapped,
                                               " bytes in /dev/shm: ", std::strerror(error)));
  }
  void* base = mmap(nullptr, segment->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap(", name, "): ", std::strerror(errno)));
  }
  segment->base = static_cast<char*>(base);
  return segment;
}

// Bytes /dev/shm can still take (0 when it cannot be read).
size_t FreeShmBytes() {
  struct statvfs fs = {};
  if (statvfs("/dev/shm", &fs) != 0) return 0;
  return static_cast<size_t>(fs.f_bavail) * fs.f_frsize;
}

// False once the process is gone (or a zombie waiting to be reaped).
bool Alive(int64_t pid) {
  if (pid <= 0) return true;  // not registered yet
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

// Sums element i of every rank's copy in rank order, divides, and writes the
// result into every copy, for i in [begin, end). Fixed-size blocks, so that
// the compiler vectorizes the loops.
template <typename T>
void ReduceRange(T* const* copies, int world_size, size_t begin, size_t end, int divisor) {
  constexpr size_t kBlock = 1024;
  T sum[kBlock];
  const T scale_divisor = static_cast<T>(divisor);
  auto reduce = [&](size_t start, size_t n) {
    std::memcpy(sum, copies[0] + start, n * sizeof(T));
    for (int q = 1; q < world_size; ++q) {
      const T* copy = copies[q] + start;
      if (n == kBlock) {
        for (size_t i = 0; i < kBlock; ++i) sum[i] += copy[i];
      } else {
        for (size_t i = 0; i < n; ++i) sum[i] += copy[i];
      }
    }
    if (divisor != 1) {
      if (n == kBlock) {
        for (size_t i = 0; i < kBlock; ++i) sum[i] /= scale_divisor;
      } else {
        for (size_t i = 0; i < n; ++i) sum[i] /= scale_divisor;
      }
    }
    for (int q = 0; q < world_size; ++q) std::memcpy(copies[q] + start, sum, n * sizeof(T));
  };
  for (size_t start = begin; start < end; start += kBlock)
    reduce(start, std::min(kBlock, end - start));
}

}  // namespace

SharedMemoryCollectives::SharedMemoryCollectives(int rank, int world_size, size_t capacity,
                                                 absl::Duration timeout,
                                                 std::shared_ptr<Segment> staging)
    : rank_(rank),
      world_size_(world_size),
      capacity_(capacity),
      timeout_(timeout),
      staging_(std::move(staging)) {}

SharedMemoryCollectives::~SharedMemoryCollectives() = default;

absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> SharedMemoryCollectives::Create(
    const std::string& name, int rank, int world_size, size_t capacity_bytes,
    absl::Duration timeout) {
  if (world_size > kMaxRanks) {
    return absl::UnavailableError(absl::StrCat("more than ", kMaxRanks, " ranks"));
  }
  capacity_bytes = capacity_bytes / 4096 * 4096;
  if (capacity_bytes == 0) return absl::UnavailableError("/dev/shm is full");
  absl::StatusOr<std::shared_ptr<Segment>> staging =
      MapSegment("/" + name, kHeaderBytes, capacity_bytes, world_size, /*reserve=*/false);
  if (!staging.ok()) return staging.status();
  reinterpret_cast<Header*>((*staging)->base)->pid[rank].store(getpid(), std::memory_order_release);
  return std::unique_ptr<SharedMemoryCollectives>(
      new SharedMemoryCollectives(rank, world_size, capacity_bytes, timeout, *std::move(staging)));
}

size_t SharedMemoryCollectives::AffordableCapacity(int world_size, size_t wanted_bytes) {
  // The staging slots stay sparse (pages appear as buffers use them): keep
  // them to half of what /dev/shm has free, so that a small one (a container's
  // 64 MB) means smaller slots rather than a SIGBUS.
  return std::min(wanted_bytes, FreeShmBytes() / 2 / world_size) / 4096 * 4096;
}

absl::StatusOr<std::shared_ptr<void>> SharedMemoryCollectives::AllocateShared(size_t bytes) {
  std::lock_guard<std::mutex> lock(shared_mutex_);
  const std::string name = absl::StrCat(staging_->name, ".", shared_allocated_++);
  const size_t slot_bytes = RoundUp(std::max<size_t>(bytes, 1), 4096);
  // Leave room for the staging slots, which are sparse and may fill up later.
  const size_t staging_bytes = capacity_ * world_size_;
  if (FreeShmBytes() < slot_bytes * world_size_ + staging_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("/dev/shm has no room for ", name, " next to the staging slots"));
  }
  absl::StatusOr<std::shared_ptr<Segment>> segment =
      MapSegment(name, 0, slot_bytes, world_size_, /*reserve=*/true);
  if (!segment.ok()) return segment.status();
  shared_.push_back(*segment);
  return std::shared_ptr<void>(*segment, (*segment)->slot(rank_));
}

std::shared_ptr<SharedMemoryCollectives::Segment> SharedMemoryCollectives::FindShared(
    const void* data, size_t bytes, size_t* offset) {
  const char* begin = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(shared_mutex_);
  std::shared_ptr<Segment> found;
  shared_.erase(std::remove_if(shared_.begin(), shared_.end(),
                               [&](const std::weak_ptr<Segment>& weak) {
                                 std::shared_ptr<Segment> segment = weak.lock();
                                 if (segment == nullptr) return true;
                                 const char* slot = segment->slot(rank_);
                                 if (begin >= slot && begin + bytes <= slot + segment->slot_bytes) {
                                   *offset = static_cast<size_t>(begin - slot);
                                   found = segment;
                                 }
                                 return false;
                               }),
                shared_.end());
  return found;
}

bool SharedMemoryCollectives::IsShared(const void* data, size_t bytes) {
  size_t offset = 0;
  return FindShared(data, bytes, &offset) != nullptr;
}

absl::Status SharedMemoryCollectives::WaitForAll(const char* what, bool arrived) {
  auto* header = reinterpret_cast<Header*>(staging_->base);
  std::atomic<uint64_t>* counters = arrived ? header->arrived : header->left;
  const absl::Time deadline = absl::Now() + timeout_;
  for (int r = 0; r < world_size_; ++r) {
    for (int spin = 0; counters[r].load(std::memory_order_acquire) < generation_; ++spin) {
      if (spin < 200) continue;
      if (spin < 2000) {
        sched_yield();
        continue;
      }
      if ((spin & 1023) == 0) {
        const int64_t pid = header->pid[r].load(std::memory_order_acquire);
        if (!Alive(pid)) {
          return absl::InternalError(
              absl::StrCat("shared-memory all_reduce: rank ", r, " (pid ", pid,
                           ") exited while the others waited for it to ", what));
        }
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("shared-memory all_reduce: timed out after ",
                           absl::FormatDuration(timeout_), " waiting for rank ", r, " to ", what));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryCollectives::Arrive() {
  auto* header = reinterpret_cast<Header*>(staging_->base);
  ++generation_;
  header->arrived[rank_].store(generation_, std::memory_order_release);
  return WaitForAll("arrive", /*arrived=*/true);
}

absl::Status SharedMemoryCollectives::Leave(const char* what) {
  auto* header = reinterpret_cast<Header*>(staging_->base);
  header->left[rank_].store(generation_, std::memory_order_release);
  return WaitForAll(what, /*arrived=*/false);
}

template <typename T>
absl::Status SharedMemoryCollectives::Sum(T* data, size_t count, int divisor) {
  const size_t bytes = count * sizeof(T);
  size_t offset = 0;
  std::shared_ptr<Segment> segment = FindShared(data, bytes, &offset);
  const bool staged = segment == nullptr;
  if (staged) {
    if (bytes > capacity_) {
      return absl::InvalidArgumentError("buffer larger than the shared-memory slots");
    }
    // Nobody reads our slot any more: every rank left the previous generation's
    // reduction before we could.
    segment = staging_;
    std::memcpy(segment->slot(rank_), data, bytes);
  }
  T* copies[kMaxRanks];
  for (int q = 0; q < world_size_; ++q) copies[q] = reinterpret_cast<T*>(segment->slot(q) + offset);

  if (absl::Status s = Arrive(); !s.ok()) return s;
  // Our chunk, in cache-line multiples so that no two ranks write one line.
  const size_t per_line = 64 / sizeof(T);
  const size_t chunk = RoundUp((count + world_size_ - 1) / world_size_, per_line);
  const size_t begin = std::min(count, chunk * rank_);
  ReduceRange(copies, world_size_, begin, std::min(count, begin + chunk), divisor);
  if (absl::Status s = Leave("reduce its share"); !s.ok()) return s;
  if (staged) std::memcpy(data, segment->slot(rank_), bytes);
  return absl::OkStatus();
}

absl::Status SharedMemoryCollectives::Broadcast(void* data, size_t bytes, int src) {
  if (bytes > capacity_) {
    return absl::InvalidArgumentError("buffer larger than the shared-memory slots");
  }
  // As in Sum: nobody reads our slot between generations. An empty tensor's data may be null,
  // which memcpy must not see even for 0 bytes (UBSan).
  if (rank_ == src && bytes > 0) std::memcpy(staging_->slot(src), data, bytes);
  if (absl::Status s = Arrive(); !s.ok()) return s;
  if (rank_ != src && bytes > 0) std::memcpy(data, staging_->slot(src), bytes);
  return Leave("copy the broadcast out");
}

absl::Status SharedMemoryCollectives::SumFloat(float* data, size_t count, int divisor) {
  return Sum(data, count, divisor);
}

absl::Status SharedMemoryCollectives::SumDouble(double* data, size_t count, int divisor) {
  return Sum(data, count, divisor);
}

}  // namespace ddpspawn
