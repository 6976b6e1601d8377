// Collectives through shared memory (see shm_collectives.h).
#include "core/comm/shm_collectives.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/util/process_state.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

// One rank's call as the header keeps it, plus where its data lies (an AllocateShared() segment's
// index and offset, or -1).
struct CallRecord {
  CallFingerprint call;
  int64_t segment;
  uint64_t offset;
  char unused[56];
};
static_assert(sizeof(CallRecord) == 128, "two cache lines per rank");

// At the start of the staging segment, per rank: the last generation it arrived at (its slot is
// ready and its call published) and left (it is done with the others' slots), when it arrived
// (CLOCK_MONOTONIC nanoseconds), its pid (to notice a rank that died instead of waiting until the
// timeout), and its call. AllocateShared() passes the new segment's name from rank 0 and every
// rank's success through it.
struct SharedMemoryCollectives::Header {
  std::atomic<uint64_t> arrived[kMaxRanks];
  std::atomic<uint64_t> left[kMaxRanks];
  std::atomic<int64_t> pid[kMaxRanks];
  CallRecord call[kMaxRanks];
  std::atomic<int32_t> mapped[kMaxRanks];
  char allocation_name[256];
  std::atomic<int64_t> arrived_ns[kMaxRanks];
};

// One mapped /dev/shm segment: an optional header, then one slot per rank. Unmapped when the last
// reference goes; its creator unlinks the name as soon as every rank has mapped it (or when it
// goes, should that never happen).
struct SharedMemoryCollectives::Segment {
  std::string name;  // set while this process created it and it is not unlinked
  int64_t index = -1;
  char* base = nullptr;
  size_t mapped = 0, header_bytes = 0, slot_bytes = 0;

  char* slot(int rank) const { return base + header_bytes + rank * slot_bytes; }
  void Unlink() {
    if (!name.empty()) shm_unlink(name.c_str());
    name.clear();
  }
  ~Segment() {
    if (base != nullptr) munmap(base, mapped);
    Unlink();
  }
};

namespace {

using Segment = SharedMemoryCollectives::Segment;

// Segments and slots are sized in whole pages.
constexpr size_t kPageBytes = 4096;
constexpr size_t kHeaderBytes = 3 * kPageBytes;
static_assert(sizeof(SharedMemoryCollectives::Header) <= kHeaderBytes, "header too large");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "needs lock-free atomics");

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// "/<prefix>.<32 hex digits>": 128 bits from the kernel's random source, so that no other user can
// create the name first.
absl::StatusOr<std::string> UnpredictableName(const std::string& prefix) {
  unsigned char random[16];
  if (getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return absl::UnavailableError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  std::string name = absl::StrCat("/", prefix, ".");
  for (unsigned char byte : random) absl::StrAppend(&name, absl::Hex(byte, absl::kZeroPad2));
  return name;
}

absl::StatusOr<std::shared_ptr<Segment>> MapFd(int fd, std::shared_ptr<Segment> segment) {
  void* base = mmap(nullptr, segment->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap of a shared-memory segment of ",
                                               segment->mapped, " bytes: ", std::strerror(error)));
  }
  segment->base = static_cast<char*>(base);
  return segment;
}

std::shared_ptr<Segment> NewSegment(size_t header_bytes, size_t slot_bytes, int world_size) {
  auto segment = std::make_shared<Segment>();
  segment->header_bytes = header_bytes;
  segment->slot_bytes = slot_bytes;
  segment->mapped = header_bytes + slot_bytes * static_cast<size_t>(world_size);
  return segment;
}

// Creates a segment that did not exist (mode 0600) under a new unpredictable name starting with
// `prefix`, and maps it. With `reserve`, the pages are allocated now, so that a full /dev/shm is an
// error here rather than a SIGBUS later.
absl::StatusOr<std::shared_ptr<Segment>> CreateSegment(const std::string& prefix,
                                                       size_t header_bytes, size_t slot_bytes,
                                                       int world_size, bool reserve) {
  std::shared_ptr<Segment> segment = NewSegment(header_bytes, slot_bytes, world_size);
  ASSIGN_OR_RETURN(std::string name, UnpredictableName(prefix));
  // glibc's shm_open adds O_NOFOLLOW.
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("creating shared-memory segment ", name, ": ", std::strerror(errno)));
  }
  segment->name = name;  // from here on the segment unlinks it
  // New pages read as zeros.
  int error = ftruncate(fd, static_cast<off_t>(segment->mapped)) == 0 ? 0 : errno;
  if (error == 0 && reserve) error = posix_fallocate(fd, 0, static_cast<off_t>(segment->mapped));
  if (error != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("sizing ", name, " to ", segment->mapped,
                                               " bytes in /dev/shm: ", std::strerror(error)));
  }
  return MapFd(fd, std::move(segment));
}

// Opens and maps the segment rank 0 created, refusing anything that is not a file of this user's,
// of the expected size, that no one else may access.
absl::StatusOr<std::shared_ptr<Segment>> OpenSegment(const std::string& name, size_t header_bytes,
                                                     size_t slot_bytes, int world_size) {
  std::shared_ptr<Segment> segment = NewSegment(header_bytes, slot_bytes, world_size);
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("opening shared-memory segment ", name, ": ", std::strerror(errno)));
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 0077) != 0 || static_cast<size_t>(st.st_size) != segment->mapped) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrFormat(
        "refusing shared-memory segment %s: it belongs to uid %d with mode %04o and %d bytes; "
        "expected uid %d, mode 0600 and %d bytes (was it created by another user?)",
        name, st.st_uid, st.st_mode & 07777, st.st_size, geteuid(), segment->mapped));
  }
  return MapFd(fd, std::move(segment));
}

void CopyText(absl::string_view text, char* out, size_t size) {
  const size_t n = std::min(text.size(), size - 1);
  if (n > 0) std::memcpy(out, text.data(), n);  // an empty view's data may be null
  std::memset(out + n, 0, size - n);
}

CallRecord ToRecord(const CallSignature& call, int64_t segment, uint64_t offset) {
  return CallRecord{CallFingerprint::Of(call), segment, offset, {}};
}

bool SameCall(const CallRecord& a, const CallRecord& b) {
  return a.call == b.call && a.segment == b.segment && a.offset == b.offset;
}

// The record's call, and where its data lies.
std::string Describe(const CallRecord& record) {
  std::string text = ddpspawn::Describe(record.call.signature());
  if (record.segment >= 0) {
    absl::StrAppend(&text, ", in shared buffer ", record.segment, " at byte ", record.offset);
  }
  return text;
}

int64_t MonotonicNanos() {
  timespec now = {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
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
  return !HasExited(ReadProcessState(static_cast<pid_t>(pid)));
}

// Sums element i of every rank's copy in rank order and divides, for i in [begin, end), handing
// each block of sums to `write(start, sums, n)` (elements start .. start + n). Fixed-size blocks,
// so that the compiler vectorizes the loops.
template <typename T, typename Write>
void ReduceRange(T* const* copies, int world_size, size_t begin, size_t end, int divisor,
                 Write&& write) {
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
    write(start, sum, n);
  };
  for (size_t start = begin; start < end; start += kBlock)
    reduce(start, std::min(kBlock, end - start));
}

}  // namespace

SharedMemoryCollectives::SharedMemoryCollectives(std::string name_prefix, int rank, int world_size,
                                                 size_t capacity, absl::Duration timeout,
                                                 std::shared_ptr<Segment> staging)
    : name_prefix_(std::move(name_prefix)),
      rank_(rank),
      world_size_(world_size),
      capacity_(capacity),
      timeout_(timeout),
      staging_(std::move(staging)),
      arrivals_(world_size, "shared memory") {}

SharedMemoryCollectives::~SharedMemoryCollectives() = default;

absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> SharedMemoryCollectives::Create(
    const std::string& name_prefix, int rank, int world_size, size_t capacity_bytes,
    absl::Duration timeout, const SetupChannel& channel) {
  capacity_bytes = capacity_bytes / kPageBytes * kPageBytes;
  absl::Status status = absl::OkStatus();
  if (world_size > kMaxRanks) {
    status = absl::UnavailableError(absl::StrCat("more than ", kMaxRanks, " ranks"));
  } else if (capacity_bytes == 0) {
    status = absl::UnavailableError("/dev/shm is full");
  }
  std::shared_ptr<Segment> staging;
  std::string name;
  if (rank == 0 && status.ok()) {
    absl::StatusOr<std::shared_ptr<Segment>> created =
        CreateSegment(name_prefix, kHeaderBytes, capacity_bytes, world_size, /*reserve=*/false);
    if (created.ok()) {
      staging = *std::move(created);
      name = staging->name;
    } else {
      status = created.status();
    }
  }
  name = channel.broadcast_from_rank0(name);
  if (rank != 0 && status.ok()) {
    absl::StatusOr<std::shared_ptr<Segment>> opened =
        name.empty() ? absl::UnavailableError("rank 0 could not create the staging segment")
                     : OpenSegment(name, kHeaderBytes, capacity_bytes, world_size);
    if (opened.ok()) {
      staging = *std::move(opened);
    } else {
      status = opened.status();
    }
  }
  const bool everyone = channel.all(status.ok());
  if (staging != nullptr) staging->Unlink();  // every rank has it mapped, or none needs it
  if (!status.ok()) return status;
  if (!everyone) return absl::UnavailableError("another rank could not map the staging segment");
  reinterpret_cast<Header*>(staging->base)->pid[rank].store(getpid(), std::memory_order_release);
  return std::unique_ptr<SharedMemoryCollectives>(new SharedMemoryCollectives(
      name_prefix, rank, world_size, capacity_bytes, timeout, std::move(staging)));
}

size_t SharedMemoryCollectives::AffordableCapacity(int world_size, size_t wanted_bytes) {
  // The staging slots stay sparse (pages appear as buffers use them): keep them to half of what
  // /dev/shm has free, so that a small one (a container's 64 MB) means smaller slots rather than a
  // SIGBUS.
  return std::min(wanted_bytes, FreeShmBytes() / 2 / world_size) / kPageBytes * kPageBytes;
}

absl::StatusOr<std::shared_ptr<void>> SharedMemoryCollectives::AllocateShared(size_t bytes) {
  auto* header = reinterpret_cast<Header*>(staging_->base);
  const size_t slot_bytes = RoundUp(std::max<size_t>(bytes, 1), kPageBytes);
  const int64_t index = shared_allocated_++;
  absl::Status status = absl::OkStatus();
  std::shared_ptr<Segment> segment;
  if (rank_ == 0) {
    // Leave room for the staging slots, which are sparse and may fill up later.
    const size_t staging_bytes = capacity_ * world_size_;
    absl::StatusOr<std::shared_ptr<Segment>> created =
        FreeShmBytes() < slot_bytes * world_size_ + staging_bytes
            ? absl::ResourceExhaustedError(absl::StrCat(
                  "/dev/shm has no room for ", bytes, " bytes per rank next to the staging slots"))
            : CreateSegment(name_prefix_, 0, slot_bytes, world_size_, /*reserve=*/true);
    if (created.ok()) {
      segment = *std::move(created);
    } else {
      status = created.status();
    }
    CopyText(segment != nullptr ? segment->name : "", header->allocation_name,
             sizeof header->allocation_name);
  }
  CallSignature call;
  call.kind = "allocate";
  call.dtype = "bytes";
  call.count = bytes;
  RETURN_IF_ERROR(Arrive(call, -1, 0));
  if (rank_ != 0) {
    const std::string name(header->allocation_name,
                           strnlen(header->allocation_name, sizeof header->allocation_name));
    absl::StatusOr<std::shared_ptr<Segment>> opened =
        name.empty() ? absl::ResourceExhaustedError("rank 0 could not create a shared buffer")
                     : OpenSegment(name, 0, slot_bytes, world_size_);
    if (opened.ok()) {
      segment = *std::move(opened);
    } else {
      status = opened.status();
    }
  }
  header->mapped[rank_].store(status.ok() ? 1 : 0, std::memory_order_relaxed);
  RETURN_IF_ERROR(Leave("map a new shared buffer"));
  if (segment != nullptr) segment->Unlink();  // every rank has it mapped, or none needs it
  if (!status.ok()) return status;
  for (int r = 0; r < world_size_; ++r) {
    if (header->mapped[r].load(std::memory_order_relaxed) == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rank ", r, " could not map a new shared buffer"));
    }
  }
  segment->index = index;
  absl::MutexLock lock(&shared_mutex_);
  shared_.push_back(segment);
  return std::shared_ptr<void>(segment, segment->slot(rank_));
}

std::shared_ptr<SharedMemoryCollectives::Segment> SharedMemoryCollectives::FindShared(
    const void* data, size_t bytes, size_t* offset) {
  const char* begin = static_cast<const char*>(data);
  absl::MutexLock lock(&shared_mutex_);
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
              absl::StrCat("shared-memory collectives: rank ", r, " (pid ", pid,
                           ") exited while the others waited for it to ", what));
        }
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("shared-memory collectives: timed out after ",
                           absl::FormatDuration(timeout_), " waiting for rank ", r, " to ", what));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryCollectives::Arrive(const CallSignature& call, int64_t segment,
                                             uint64_t offset) {
  auto* header = reinterpret_cast<Header*>(staging_->base);
  ++generation_;
  // Nobody reads our record now: every rank left the previous generation.
  header->call[rank_] = ToRecord(call, segment, offset);
  header->arrived_ns[rank_].store(MonotonicNanos(), std::memory_order_relaxed);
  header->arrived[rank_].store(generation_, std::memory_order_release);
  RETURN_IF_ERROR(WaitForAll("arrive", /*arrived=*/true));
  // Every stamp of this generation is in (released with `arrived`), and none changes before every
  // rank has left it.
  int64_t arrived_ns[kMaxRanks];
  for (int r = 0; r < world_size_; ++r) {
    arrived_ns[r] = header->arrived_ns[r].load(std::memory_order_relaxed);
  }
  arrivals_.Record(arrived_ns);
  absl::Status agreed = compare_calls_ ? CompareCalls() : absl::OkStatus();
  if (!agreed.ok()) {
    // Every rank sees the same records and leaves here.
    Leave("compare the calls").IgnoreError();
  }
  return agreed;
}

absl::Status SharedMemoryCollectives::CompareCalls() {
  const auto* header = reinterpret_cast<const Header*>(staging_->base);
  bool same = true;
  for (int r = 1; r < world_size_; ++r) same = same && SameCall(header->call[r], header->call[0]);
  if (same) return absl::OkStatus();
  std::vector<std::string> calls;
  calls.reserve(world_size_);
  std::vector<CallFingerprint> prints;
  for (int r = 0; r < world_size_; ++r) {
    calls.push_back(Describe(header->call[r]));
    prints.push_back(header->call[r].call);
  }
  return MismatchedCallsError(calls, OnlyBackwardPassesDiffer(prints));
}

absl::Status SharedMemoryCollectives::Leave(const char* what) {
  auto* header = reinterpret_cast<Header*>(staging_->base);
  header->left[rank_].store(generation_, std::memory_order_release);
  return WaitForAll(what, /*arrived=*/false);
}

absl::Status SharedMemoryCollectives::Agree(const CallSignature& call) {
  RETURN_IF_ERROR(Arrive(call, -1, 0));
  return Leave("finish comparing the calls");
}

template <typename T>
absl::Status SharedMemoryCollectives::Sum(T* data, size_t count, int divisor,
                                          const CallSignature& call) {
  const size_t bytes = count * sizeof(T);
  size_t offset = 0;
  ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment, CopyIn(data, bytes, &offset));
  const bool staged = segment == staging_;
  T* copies[kMaxRanks];
  for (int q = 0; q < world_size_; ++q) copies[q] = reinterpret_cast<T*>(segment->slot(q) + offset);

  RETURN_IF_ERROR(Arrive(call, staged ? -1 : segment->index, offset));
  // Our chunk, in cache-line multiples so that no two ranks write one line.
  const size_t per_line = 64 / sizeof(T);
  const size_t chunk = RoundUp((count + world_size_ - 1) / world_size_, per_line);
  const size_t begin = std::min(count, chunk * rank_);
  ReduceRange(copies, world_size_, begin, std::min(count, begin + chunk), divisor,
              [&](size_t start, const T* sum, size_t n) {
                for (int q = 0; q < world_size_; ++q) {
                  std::memcpy(copies[q] + start, sum, n * sizeof(T));
                }
              });
  RETURN_IF_ERROR(Leave("reduce its share"));
  if (staged && bytes > 0) std::memcpy(data, segment->slot(rank_), bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SharedMemoryCollectives::Segment>> SharedMemoryCollectives::CopyIn(
    const void* data, size_t bytes, size_t* offset) {
  std::shared_ptr<Segment> segment = FindShared(data, bytes, offset);
  if (segment != nullptr) return segment;
  if (bytes > capacity_) {
    return absl::InvalidArgumentError("buffer larger than the shared-memory slots");
  }
  // Nobody reads our slot any more: every rank left the previous generation's collective before we
  // could. An empty buffer's data may be null, which memcpy must not see even for 0 bytes.
  *offset = 0;
  if (bytes > 0) std::memcpy(staging_->slot(rank_), data, bytes);
  return staging_;
}

template <typename T>
absl::Status SharedMemoryCollectives::ReduceScatterSum(const T* input, T* output, size_t shard,
                                                       int divisor, const CallSignature& call) {
  const size_t bytes = shard * static_cast<size_t>(world_size_) * sizeof(T);
  size_t offset = 0;
  ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment, CopyIn(input, bytes, &offset));
  const bool staged = segment == staging_;
  T* copies[kMaxRanks];
  for (int q = 0; q < world_size_; ++q) copies[q] = reinterpret_cast<T*>(segment->slot(q) + offset);
  RETURN_IF_ERROR(Arrive(call, staged ? -1 : segment->index, offset));
  // Our shard of every copy, summed into our output only: nobody writes the copies.
  const size_t begin = shard * static_cast<size_t>(rank_);
  ReduceRange(copies, world_size_, begin, begin + shard, divisor,
              [&](size_t start, const T* sum, size_t n) {
                std::memcpy(output + (start - begin), sum, n * sizeof(T));
              });
  return Leave("reduce its shard");
}

absl::Status SharedMemoryCollectives::ReduceScatterFloat(const float* input, float* output,
                                                         size_t shard, int divisor,
                                                         const CallSignature& call) {
  return ReduceScatterSum(input, output, shard, divisor, call);
}

absl::Status SharedMemoryCollectives::ReduceScatterDouble(const double* input, double* output,
                                                          size_t shard, int divisor,
                                                          const CallSignature& call) {
  return ReduceScatterSum(input, output, shard, divisor, call);
}

absl::Status SharedMemoryCollectives::AllGather(const void* input, size_t bytes, void* output,
                                                const CallSignature& call) {
  if (bytes > capacity_) {
    return absl::InvalidArgumentError("buffer larger than the shared-memory slots");
  }
  if (bytes > 0) std::memcpy(staging_->slot(rank_), input, bytes);
  RETURN_IF_ERROR(Arrive(call, -1, 0));
  if (bytes > 0) {
    for (int q = 0; q < world_size_; ++q) {
      std::memcpy(static_cast<char*>(output) + q * bytes, staging_->slot(q), bytes);
    }
  }
  return Leave("copy the gathered slots out");
}

absl::Status SharedMemoryCollectives::Copy(void* data, size_t bytes, int src, bool in_place,
                                           const CallSignature& call) {
  size_t offset = 0;
  std::shared_ptr<Segment> segment = in_place ? FindShared(data, bytes, &offset) : nullptr;
  const bool staged = segment == nullptr;
  if (staged) {
    if (bytes > capacity_) {
      return absl::InvalidArgumentError("buffer larger than the shared-memory slots");
    }
    segment = staging_;
    // As in Sum: nobody reads our slot between generations. An empty tensor's data may be null,
    // which memcpy must not see even for 0 bytes (UBSan).
    if (rank_ == src && bytes > 0) std::memcpy(staging_->slot(src), data, bytes);
  }
  RETURN_IF_ERROR(Arrive(call, staged ? -1 : segment->index, offset));
  if (rank_ != src && bytes > 0) std::memcpy(data, segment->slot(src) + offset, bytes);
  return Leave("copy the broadcast out");
}

absl::Status SharedMemoryCollectives::Broadcast(void* data, size_t bytes, int src,
                                                const CallSignature& call) {
  return Copy(data, bytes, src, /*in_place=*/false, call);
}

absl::Status SharedMemoryCollectives::BroadcastInPlace(void* data, size_t bytes, int src,
                                                       const CallSignature& call) {
  return Copy(data, bytes, src, /*in_place=*/true, call);
}

absl::Status SharedMemoryCollectives::SumFloat(float* data, size_t count, int divisor,
                                               const CallSignature& call) {
  return Sum(data, count, divisor, call);
}

absl::Status SharedMemoryCollectives::SumDouble(double* data, size_t count, int divisor,
                                                const CallSignature& call) {
  return Sum(data, count, divisor, call);
}

}  // namespace ddpspawn
