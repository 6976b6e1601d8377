// DistributedSampler: which dataset indices each rank reads in an epoch, with the semantics of
// PyTorch's torch.utils.data.DistributedSampler (the same seeded permutation on every rank, padded
// or truncated to a multiple of the number of replicas, then every num_replicas-th index from the
// rank). An epoch may also be dealt from a position of its order on (the rest of an epoch that
// other ranks began: EpochPositionAfter()).
#ifndef DDPSPAWN_CORE_TRAIN_DATA_SAMPLER_H_
#define DDPSPAWN_CORE_TRAIN_DATA_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
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
  // Deals only the epoch's order from position `start` on (in [0, dataset_size]; 0: all of it, as
  // PyTorch): the rest of an epoch begun on another number of ranks. The rest is padded or
  // truncated as a whole epoch is, and may be empty (no sample for any rank). InvalidArgument out
  // of range; the sampler is unchanged then.
  absl::Status set_start(int64_t start);
  int64_t start() const { return start_; }

  // This rank's indices for the current epoch: a permutation of [0, dataset_size) seeded by seed +
  // epoch (the same on every rank), or 0..dataset_size-1 without shuffle; from position start() on,
  // padded by repeating indices from there (or truncated with drop_last) to total_size(); then
  // every num_replicas-th index, starting at rank. Always num_samples() indices.
  std::vector<int64_t> Indices() const;

  // Per rank: ceil(n / num_replicas), or floor with drop_last, for the n = dataset_size - start()
  // samples dealt.
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * num_replicas.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  // Each rank's share of `samples` (>= 0) dealt to `num_replicas`.
  static int64_t DealtPerRank(int64_t samples, int num_replicas, bool drop_last);

 private:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                     bool drop_last)
      : dataset_size_(dataset_size),
        num_replicas_(num_replicas),
        rank_(rank),
        shuffle_(shuffle),
        seed_(seed),
        drop_last_(drop_last) {}

  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
};

// Where in its epoch's order a dealing that began at `start` stands once every one of its
// `num_replicas` ranks has taken its first `taken_per_rank` indices (the same rule as the
// sampler's: `drop_last`, `dataset_size`): the ranks took the order's positions start .. start +
// num_replicas
// * taken_per_rank - 1 between them (padding beyond the order's end repeats samples already taken,
// and drop_last's truncated tail is skipped this epoch), so a new dealing from the returned
// position, on any number of ranks, visits every other sample of the epoch exactly once. In [start,
// dataset_size].
int64_t EpochPositionAfter(int64_t dataset_size, int64_t start, int num_replicas, bool drop_last,
                           int64_t taken_per_rank);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_DATA_SAMPLER_H_
