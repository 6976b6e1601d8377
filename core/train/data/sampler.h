// DistributedSampler: which dataset indices each rank reads in an epoch, with the semantics of
// PyTorch's torch.utils.data.DistributedSampler (the same seeded permutation on every rank, padded
// or truncated to a multiple of the number of replicas, then every num_replicas-th index from the
// rank).
#ifndef DDPSPAWN_CORE_TRAIN_DATA_SAMPLER_H_
#define DDPSPAWN_CORE_TRAIN_DATA_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpspawn {

// ceil(samples / batch_size): the number of batches of `batch_size` (>= 1) in `samples` (>= 0)
// indices, the last one short; exact for any such int64 values (no samples + batch_size - 1 to
// overflow).
int64_t BatchCount(int64_t samples, int64_t batch_size);

// The end (exclusive) of batch `batch` (in [0, BatchCount)): the smaller of (batch + 1) *
// batch_size and samples, without overflow.
int64_t BatchEnd(int64_t batch, int64_t batch_size, int64_t samples);

// Plain values; thread-compatible (Indices() is const and seeds a generator of its own on each
// call).
class DistributedSampler {
 public:
  // InvalidArgument if dataset_size < 1, num_replicas < 1, rank is not in [0, num_replicas), or
  // drop_last and dataset_size < num_replicas (some rank would get no sample).
  static absl::StatusOr<DistributedSampler> Create(int64_t dataset_size, int num_replicas, int rank,
                                                   bool shuffle = true, uint64_t seed = 0,
                                                   bool drop_last = false);

  // Call at the start of every epoch so that shuffling differs between epochs.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }

  // This rank's indices for the current epoch: a permutation of [0, dataset_size) seeded by seed +
  // epoch (the same on every rank), or 0..dataset_size-1 without shuffle; padded by repeating
  // indices from its start (or truncated with drop_last) to total_size(); then every
  // num_replicas-th index, starting at rank. Always num_samples() indices.
  std::vector<int64_t> Indices() const;

  // Per rank: ceil(dataset_size / num_replicas), or floor with drop_last.
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * num_replicas.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                     int64_t num_samples)
      : dataset_size_(dataset_size),
        num_replicas_(num_replicas),
        rank_(rank),
        shuffle_(shuffle),
        seed_(seed),
        num_samples_(num_samples) {}

  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_DATA_SAMPLER_H_
