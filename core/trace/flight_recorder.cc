// The collectives' flight recorder (see flight_recorder.h).
#include "core/trace/flight_recorder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/env/run_dir.h"
#include "core/util/process_state.h"

namespace ddpspawn {
namespace {

constexpr int kKept = 16;  // the last calls a file keeps
constexpr char kMagic[8] = "ddpfr01";
constexpr size_t kFileBytes = 4096;

enum State : int32_t { kEmpty = 0, kStarted = 1, kSucceeded = 2, kFailed = 3 };

// One call. `seq` is 0 while the writer fills the entry in (a reader that sees it change while
// copying throws its copy away).
struct Entry {
  std::atomic<uint64_t> seq;
  std::atomic<int32_t> state;
  int32_t unused_pad;
  std::atomic<int64_t> start_ns, end_ns;  // Unix time
  CallFingerprint call;
  char unused[40];
};
static_assert(sizeof(Entry) == 128, "two cache lines per entry");

int64_t NowNanos() { return absl::ToUnixNanos(absl::Now()); }

// The call an entry holds (read while it may change: the caller checks seq).
std::string DescribeEntry(const Entry& entry) { return Describe(entry.call.signature()); }

// What /proc says of `pid`'s state; `notable` is false for a process that is merely running or
// sleeping.
std::string DescribeProcessState(pid_t pid, bool* notable) {
  *notable = true;
  switch (ReadProcessState(pid)) {
    case ProcessState::kGone:
    case ProcessState::kZombie:
      return "has exited";
    case ProcessState::kStopped:
      return "is stopped (SIGSTOP or a debugger)";
    case ProcessState::kBlocked:
      return "is blocked in the kernel (uninterruptible sleep)";
    case ProcessState::kRunning:
      *notable = false;
      return "is running";
    case ProcessState::kSleeping:
      break;
  }
  *notable = false;
  return "is sleeping";
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(std::max(d, absl::ZeroDuration())));
}

}  // namespace

struct FlightRecorder::File {
  char magic[8];
  std::atomic<int64_t> pid;
  std::atomic<uint64_t> started, finished;
  Entry entries[kKept];
};
static_assert(sizeof(FlightRecorder::File) <= kFileBytes, "the file is one page");

FlightRecorder::FlightRecorder(File* file, bool mapped) : file_(file), mapped_(mapped) {}

FlightRecorder::~FlightRecorder() {
  if (mapped_) {
    munmap(file_, kFileBytes);
  } else {
    delete file_;
  }
}

absl::StatusOr<std::unique_ptr<FlightRecorder>> FlightRecorder::Create(const std::string& path) {
  File* file = nullptr;
  if (path.empty()) {
    file = new File();
  } else {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("creating the flight recorder ", path, ": ", std::strerror(errno)));
    }
    void* base = ftruncate(fd, kFileBytes) == 0
                     ? mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
    const int error = errno;
    close(fd);
    if (base == MAP_FAILED) {
      return absl::InternalError(
          absl::StrCat("mapping the flight recorder ", path, ": ", std::strerror(error)));
    }
    file = static_cast<File*>(base);  // zero pages: every atomic reads 0
  }
  std::memcpy(file->magic, kMagic, sizeof kMagic);
  file->pid.store(getpid(), std::memory_order_release);
  return std::unique_ptr<FlightRecorder>(new FlightRecorder(file, !path.empty()));
}

uint64_t FlightRecorder::Start(const CallSignature& call) {
  absl::MutexLock lock(&mutex_);
  const uint64_t seq = file_->started.load(std::memory_order_relaxed) + 1;
  Entry& entry = file_->entries[seq % kKept];
  entry.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  entry.call = CallFingerprint::Of(call);
  entry.start_ns.store(NowNanos(), std::memory_order_relaxed);
  entry.end_ns.store(0, std::memory_order_relaxed);
  entry.state.store(kStarted, std::memory_order_relaxed);
  entry.seq.store(seq, std::memory_order_release);
  file_->started.store(seq, std::memory_order_release);
  return seq;
}

void FlightRecorder::Finish(uint64_t seq, bool ok) {
  absl::MutexLock lock(&mutex_);
  Entry& entry = file_->entries[seq % kKept];
  if (entry.seq.load(std::memory_order_relaxed) != seq) return;  // long overwritten
  entry.end_ns.store(NowNanos(), std::memory_order_relaxed);
  entry.state.store(ok ? kSucceeded : kFailed, std::memory_order_release);
  if (file_->finished.load(std::memory_order_relaxed) < seq) {
    file_->finished.store(seq, std::memory_order_release);
  }
}

std::string FlightRecorder::DescribeOwn(uint64_t seq) const {
  absl::MutexLock lock(&mutex_);
  const Entry& entry = file_->entries[seq % kKept];
  if (entry.seq.load(std::memory_order_acquire) != seq) return "";
  return DescribeEntry(entry);
}

std::vector<absl::StatusOr<RecordedRank>> ReadFlightRecorders(const std::string& run_dir,
                                                              int world_size, int generation) {
  std::vector<absl::StatusOr<RecordedRank>> ranks;
  for (int r = 0; r < world_size; ++r) {
    const std::string path = RunDirCallsFile(run_dir, r, generation);
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st = {};
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_uid != geteuid() ||
        static_cast<size_t>(st.st_size) < kFileBytes) {
      if (fd >= 0) close(fd);
      ranks.emplace_back(absl::NotFoundError(absl::StrCat("no flight record at ", path)));
      continue;
    }
    void* base = mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      ranks.emplace_back(absl::NotFoundError(absl::StrCat("cannot map ", path)));
      continue;
    }
    const auto* file = static_cast<const FlightRecorder::File*>(base);
    RecordedRank rank;
    rank.rank = r;
    rank.pid = static_cast<pid_t>(file->pid.load(std::memory_order_acquire));
    rank.started = file->started.load(std::memory_order_acquire);
    rank.finished = file->finished.load(std::memory_order_acquire);
    if (rank.started > 0) {
      const Entry& entry = file->entries[rank.started % kKept];
      const uint64_t before = entry.seq.load(std::memory_order_acquire);
      const int32_t state = entry.state.load(std::memory_order_acquire);
      rank.last_what = DescribeEntry(entry);
      rank.last_start = absl::FromUnixNanos(entry.start_ns.load(std::memory_order_relaxed));
      rank.last_end = absl::FromUnixNanos(entry.end_ns.load(std::memory_order_relaxed));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (before != rank.started || entry.seq.load(std::memory_order_relaxed) != before) {
        rank.last_what = "(being written)";
      }
      rank.last_ended = state == kSucceeded || state == kFailed;
      rank.last_ok = state == kSucceeded;
    }
    munmap(base, kFileBytes);
    ranks.emplace_back(std::move(rank));
  }
  return ranks;
}

std::string DescribeRecordedRanks(const std::vector<absl::StatusOr<RecordedRank>>& ranks,
                                  uint64_t seq, absl::Time now) {
  std::string text;
  for (size_t r = 0; r < ranks.size(); ++r) {
    absl::StrAppend(&text, "\n  rank ", r, ": ");
    if (!ranks[r].ok()) {
      absl::StrAppend(&text, "no flight record (", ranks[r].status().message(), ")");
      continue;
    }
    const RecordedRank& rank = *ranks[r];
    const std::string last =
        rank.started == 0
            ? "it has run no collective in this group"
            : absl::StrCat("#", rank.started, " ", rank.last_what, ", ",
                           rank.last_ended
                               ? absl::StrCat(rank.last_ok ? "finished" : "failed", " ",
                                              Seconds(now - rank.last_end), " ago")
                               : absl::StrCat("running for ", Seconds(now - rank.last_start)));
    bool notable = false;
    const std::string state = DescribeProcessState(rank.pid, &notable);
    if (seq != 0 && rank.started < seq) {
      absl::StrAppend(&text, "never reached call #", seq, "; its last: ", last,
                      "; its process (pid ", rank.pid, ") ", state);
    } else {
      absl::StrAppend(&text, "last call ", last);
      // A rank inside the call that stopped there, or is gone.
      if (!rank.last_ended && notable) {
        absl::StrAppend(&text, "; its process (pid ", rank.pid, ") ", state);
      }
    }
  }
  return text;
}

std::string DescribeNewestGroup(const std::string& run_dir, int world_size, absl::Time now) {
  int newest = -1;
  for (int g = 0; access(RunDirCallsFile(run_dir, 0, g).c_str(), F_OK) == 0; ++g) newest = g;
  if (newest < 0) return "";
  std::vector<absl::StatusOr<RecordedRank>> ranks =
      ReadFlightRecorders(run_dir, world_size, newest);
  uint64_t furthest = 0;
  for (const auto& rank : ranks) {
    if (rank.ok()) furthest = std::max(furthest, rank->started);
  }
  return DescribeRecordedRanks(ranks, furthest, now);
}

}  // namespace ddpspawn
