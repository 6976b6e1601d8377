// An all-reduce through shared memory for ranks on one host (the ddpspawn
// launcher's): each rank copies its buffer into its slot of a /dev/shm segment,
// waits for the others, and sums every slot in rank order, so every rank gets
// the same bits. Costs a few memory passes instead of Gloo's TCP loopback
// (which spends the CPU the ranks need for backward). Float32 and float64 sums
// of up to `capacity` bytes; anything else goes to Gloo.
#ifndef DDPSPAWN_CORE_DIST_SHM_ALLREDUCE_H_
#define DDPSPAWN_CORE_DIST_SHM_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpspawn {

class SharedMemoryAllReduce {
 public:
  static constexpr int kMaxRanks = 64;
  // Every rank calls this with the same name (e.g. the run directory's, plus
  // the group's generation), world size and capacity.
  static absl::StatusOr<std::unique_ptr<SharedMemoryAllReduce>> Create(
      const std::string& name, int rank, int world_size, size_t capacity_bytes,
      absl::Duration timeout);
  ~SharedMemoryAllReduce();

  size_t capacity() const { return capacity_; }
  // In place: data becomes the sum over the ranks. Every rank must call with
  // the same count.
  absl::Status SumFloat(float* data, size_t count);
  absl::Status SumDouble(double* data, size_t count);

 public:
  struct Header;

 private:
  SharedMemoryAllReduce(std::string name, int rank, int world_size,
                        size_t capacity, absl::Duration timeout, void* base,
                        size_t mapped);
  template <typename T>
  absl::Status Sum(T* data, size_t count);
  absl::Status WaitUntil(const char* what, uint64_t target, bool arrived);

  std::string name_;
  int rank_, world_size_;
  size_t capacity_;
  absl::Duration timeout_;
  void* base_;
  size_t mapped_;
  uint64_t generation_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DIST_SHM_ALLREDUCE_H_
