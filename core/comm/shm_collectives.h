// Collectives through shared memory for ranks on one host (the ddpspawn
// launcher's), where Gloo's TCP loopback would spend the CPU the ranks need
// for backward, and milliseconds of thread wake-ups on busy cores.
// All-reduce (float32 and float64 sums): every rank's copy of the buffer sits
// in a /dev/shm segment that all ranks map; once all have arrived, rank r sums
// chunk r of every copy in rank order (so every rank gets the same bits),
// divides it when averaging, and writes the result back into every copy. A
// buffer allocated with AllocateShared() is summed in place, with no copy at
// all (DDP's gradient buckets); any other buffer is copied into a staging slot
// and back. Broadcast: the source copies its bytes into its slot, the others
// copy them out.
#ifndef DDPSPAWN_CORE_COMM_SHM_COLLECTIVES_H_
#define DDPSPAWN_CORE_COMM_SHM_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpspawn {

class SharedMemoryCollectives {
 public:
  static constexpr int kMaxRanks = 64;
  // The staging capacity per rank, at most `wanted_bytes`, that /dev/shm can
  // hold now (0: none). Ranks may see different figures: agree on the least.
  static size_t AffordableCapacity(int world_size, size_t wanted_bytes);
  // Every rank calls this with the same name (e.g. the run directory's, plus
  // the group's generation), world size and staging capacity.
  static absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> Create(const std::string& name,
                                                                         int rank, int world_size,
                                                                         size_t capacity_bytes,
                                                                         absl::Duration timeout);
  ~SharedMemoryCollectives();

  // The largest buffer that is not in shared memory yet and can be summed.
  size_t capacity() const { return capacity_; }

  // `bytes` of zeroed memory that the other ranks reach in place. Every rank
  // must call this in the same order with the same size (it communicates
  // through the segment's name only). The memory stays mapped while the
  // returned pointer (or a copy) lives, also after this object is gone.
  absl::StatusOr<std::shared_ptr<void>> AllocateShared(size_t bytes);
  // True when `bytes` at `data` lie in memory from AllocateShared().
  bool IsShared(const void* data, size_t bytes);

  // In place: data becomes the sum over the ranks, divided by `divisor`. Every
  // rank must call with the same count and divisor, and with the same kind of
  // memory: the same offset of an AllocateShared() buffer on every rank (as
  // DDP's buckets are), or ordinary memory on every rank.
  absl::Status SumFloat(float* data, size_t count, int divisor = 1);
  absl::Status SumDouble(double* data, size_t count, int divisor = 1);
  // `bytes` at `data` become `src`'s (at most capacity() bytes).
  absl::Status Broadcast(void* data, size_t bytes, int src);

 public:
  struct Header;
  struct Segment;

 private:
  SharedMemoryCollectives(int rank, int world_size, size_t capacity, absl::Duration timeout,
                          std::shared_ptr<Segment> staging);
  template <typename T>
  absl::Status Sum(T* data, size_t count, int divisor);
  // The segment and offset of `bytes` at `data` within this rank's slot of an
  // AllocateShared() segment, or null.
  std::shared_ptr<Segment> FindShared(const void* data, size_t bytes, size_t* offset);
  absl::Status WaitForAll(const char* what, bool arrived);
  // Starts the next generation: announces that this rank's slot is ready and
  // waits for every rank's.
  absl::Status Arrive();
  // Announces that this rank is done with the others' slots and waits until
  // every rank is.
  absl::Status Leave(const char* what);

  int rank_, world_size_;
  size_t capacity_;
  absl::Duration timeout_;
  std::shared_ptr<Segment> staging_;  // the header, then one slot per rank
  uint64_t generation_ = 0;
  std::mutex shared_mutex_;  // guards the two below
  std::vector<std::weak_ptr<Segment>> shared_;
  int shared_allocated_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_SHM_COLLECTIVES_H_
