// Collectives through shared memory for ranks on one host (the ddpspawn launcher's), where Gloo's
// TCP loopback would spend the CPU the ranks need for backward, and milliseconds of thread wake-ups
// on busy cores. All-reduce (float32 and float64 sums): every rank's copy of the buffer sits in a
// /dev/shm segment that all ranks map; once all have arrived, rank r sums chunk r of every copy in
// rank order (so every rank gets the same bits), divides it when averaging, and writes the result
// back into every copy. A buffer allocated with AllocateShared() is summed in place, with no copy
// at all (DDP's gradient buckets); any other buffer is copied into a staging slot and back.
// Broadcast: the source copies its bytes into its slot, the others copy them out. Reduce-scatter:
// as all-reduce, but rank r sums chunk r into its own output and writes no copy. All-gather: each
// rank copies its bytes into its slot, then every slot out.
//
// Every collective first compares what each rank is about to run (a CallSignature, through the
// segment's header): a mismatch is an error on every rank that names each rank's call, never a sum
// of unrelated buffers. Each rank also stamps its arrival there (CLOCK_MONOTONIC, one clock for the
// host), so every rank tallies who arrived last and by how much (arrivals()).
//
// Segments: rank 0 creates each one exclusively (O_EXCL, mode 0600) under a name with 128 random
// bits, the other ranks open it only when it belongs to this user with no access for anyone else,
// and rank 0 unlinks the name as soon as every rank has mapped it, so that no other process can
// reach the memory and nothing is left in /dev/shm, however the ranks end.
//
// Thread-compatible: one thread at a time calls the collectives (they are matched across ranks by
// their order). AllocateShared's memory may be used and released from any thread. Ownership: it
// owns its mapping of the staging segment; each AllocateShared() segment belongs to the pointers
// returned for it (the object keeps weak ones).
#ifndef DDPSPAWN_CORE_COMM_SHM_COLLECTIVES_H_
#define DDPSPAWN_CORE_COMM_SHM_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/comm/arrival_report.h"
#include "core/trace/call_signature.h"

namespace ddpspawn {

class SharedMemoryCollectives {
 public:
  static constexpr int kMaxRanks = 64;

  // How the ranks reach each other while the first segment is set up (the process group's own
  // transport). Either function may throw; Create() is exception-safe.
  struct SetupChannel {
    // Returns rank 0's `value` on every rank.
    std::function<std::string(const std::string& value)> broadcast_from_rank0;
    // True on every rank when `ok` is true on every rank.
    std::function<bool(bool ok)> all;
  };

  // The staging capacity per rank, at most `wanted_bytes`, that /dev/shm can hold now (0: none).
  // Ranks may see different figures: agree on the least.
  static size_t AffordableCapacity(int world_size, size_t wanted_bytes);
  // Every rank calls this with the same name prefix (which identifies the job's segments to the
  // launcher's clean-up), world size and staging capacity. An error on one rank is an error on
  // every rank.
  static absl::StatusOr<std::unique_ptr<SharedMemoryCollectives>> Create(
      const std::string& name_prefix, int rank, int world_size, size_t capacity_bytes,
      absl::Duration timeout, const SetupChannel& channel);
  ~SharedMemoryCollectives();

  // Off: the collectives no longer compare the ranks' calls (see GroupOptions::check_calls). Every
  // rank must set the same.
  void set_compare_calls(bool compare) { compare_calls_ = compare; }

  // How the ranks arrived at every collective so far (any thread).
  ArrivalReport arrivals() const { return arrivals_.Snapshot(); }

  // The largest buffer that is not in shared memory yet and can be summed.
  size_t capacity() const { return capacity_; }

  // `bytes` of zeroed memory that the other ranks reach in place: a collective, which every rank
  // calls in the same order with the same size; an error on one rank is an error on every rank. The
  // memory stays mapped while the returned pointer (or a copy) lives, also after this object is
  // gone.
  absl::StatusOr<std::shared_ptr<void>> AllocateShared(size_t bytes);
  // True when `bytes` at `data` lie in memory from AllocateShared().
  bool IsShared(const void* data, size_t bytes);

  // Waits until every rank calls Agree with an equal signature: a barrier, and the check before a
  // collective that runs elsewhere (Gloo).
  absl::Status Agree(const CallSignature& call);
  // In place: data becomes the sum over the ranks, divided by `divisor`. Every rank calls with the
  // same count and divisor, and with the same kind of memory: the same offset of an
  // AllocateShared() buffer on every rank (as DDP's buckets are), or ordinary memory of at most
  // capacity() bytes on every rank. `call` is what the caller runs (for the check).
  absl::Status SumFloat(float* data, size_t count, int divisor, const CallSignature& call);
  absl::Status SumDouble(double* data, size_t count, int divisor, const CallSignature& call);
  // Reduce-scatter: `input` holds world_size shards of `shard` elements; `output` (shard elements)
  // gets shard `rank` of the sum over the ranks, divided by `divisor`. `input` follows Sum's rule
  // for memory (world_size * shard elements at most capacity() bytes unless in an AllocateShared()
  // buffer); `output` is any memory. The others' copies are not changed.
  absl::Status ReduceScatterFloat(const float* input, float* output, size_t shard, int divisor,
                                  const CallSignature& call);
  absl::Status ReduceScatterDouble(const double* input, double* output, size_t shard, int divisor,
                                   const CallSignature& call);
  // All-gather of `bytes` per rank (at most capacity()), any element type: `output` (world_size *
  // bytes) gets every rank's `input` in rank order.
  absl::Status AllGather(const void* input, size_t bytes, void* output, const CallSignature& call);
  // `bytes` at `data` become `src`'s (at most capacity() bytes, through `src`'s staging slot,
  // whatever memory each rank passes).
  absl::Status Broadcast(void* data, size_t bytes, int src, const CallSignature& call);
  // The same with Sum's rule for memory: the same offset of an AllocateShared() buffer on every
  // rank (copied from `src`'s copy directly, any size), or ordinary memory of at most capacity()
  // bytes on every rank.
  absl::Status BroadcastInPlace(void* data, size_t bytes, int src, const CallSignature& call);

  struct Header;
  struct Segment;

 private:
  SharedMemoryCollectives(std::string name_prefix, int rank, int world_size, size_t capacity,
                          absl::Duration timeout, std::shared_ptr<Segment> staging);
  template <typename T>
  absl::Status Sum(T* data, size_t count, int divisor, const CallSignature& call);
  // This rank's copy of `bytes` at `data` for a collective: the AllocateShared() segment it lies in
  // (and `offset` there), or the staging segment, with `data` copied into this rank's slot (at most
  // capacity() bytes).
  absl::StatusOr<std::shared_ptr<Segment>> CopyIn(const void* data, size_t bytes, size_t* offset);
  template <typename T>
  absl::Status ReduceScatterSum(const T* input, T* output, size_t shard, int divisor,
                                const CallSignature& call);
  // Broadcast, from `src`'s copy of an AllocateShared() buffer when `data` lies in one and
  // `in_place`.
  absl::Status Copy(void* data, size_t bytes, int src, bool in_place, const CallSignature& call);
  // The segment and offset of `bytes` at `data` within this rank's slot of an AllocateShared()
  // segment, or null.
  std::shared_ptr<Segment> FindShared(const void* data, size_t bytes, size_t* offset);
  absl::Status WaitForAll(const char* what, bool arrived);
  // Starts the next generation: publishes this rank's call, announces that its slot is ready, waits
  // for every rank's, and compares the calls. On a mismatch every rank leaves the generation and
  // returns the same error.
  absl::Status Arrive(const CallSignature& call, int64_t segment, uint64_t offset);
  // Announces that this rank is done with the others' slots and waits until every rank is.
  absl::Status Leave(const char* what);
  // The others' and this rank's calls of this generation, or an error naming each one when they
  // differ.
  absl::Status CompareCalls();

  const std::string name_prefix_;  // of every segment's name
  const int rank_, world_size_;
  const size_t capacity_;
  const absl::Duration timeout_;
  const std::shared_ptr<Segment> staging_;  // the header, then one slot per rank
  uint64_t generation_ = 0;
  bool compare_calls_ = true;
  absl::Mutex shared_mutex_;
  std::vector<std::weak_ptr<Segment>> shared_ ABSL_GUARDED_BY(shared_mutex_);
  int64_t shared_allocated_ = 0;  // the collectives' thread only
  ArrivalTally arrivals_;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_SHM_COLLECTIVES_H_
