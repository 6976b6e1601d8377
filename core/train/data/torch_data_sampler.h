// PyTorchDistributedSampler: ddpspawn's DistributedSampler (PyTorch's semantics: one seeded
// permutation per epoch on every rank, padded, then every num_replicas-th index from the rank) as a
// torch::data sampler, for a LibTorch loop's make_data_loader. LibTorch's own
// DistributedRandomSampler and DistributedSequentialSampler give each rank a contiguous range
// instead, so the same seed shards differently from PyTorch.
#ifndef DDPSPAWN_CORE_TRAIN_DATA_TORCH_DATA_SAMPLER_H_
#define DDPSPAWN_CORE_TRAIN_DATA_TORCH_DATA_SAMPLER_H_

#include <torch/data/samplers/distributed.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/train/data/sampler.h"

namespace ddpspawn {

// A data loader takes its sampler by value, so a loop cannot call set_epoch() between epochs: every
// reset() after the first (the loader resets its sampler at the start of each pass over it) begins
// the next epoch, and the first pass reads set_epoch()'s epoch (0 by default).
//
// Thread-compatible, as torch::data samplers are: the loader calls it from one thread.
class PyTorchDistributedSampler : public torch::data::samplers::DistributedSampler<> {
 public:
  // The arguments of DistributedSampler::Create, and its errors. In a rank of a job
  // (DetectClusterEnvironment: a ddpspawn launcher, torchrun, SLURM, WORLD_SIZE), num_replicas and
  // rank must be that job's world size and rank, or num_replicas 1 (every sample): InvalidArgument
  // otherwise, as the ranks would skip or repeat samples.
  static absl::StatusOr<PyTorchDistributedSampler> Create(int64_t dataset_size, int num_replicas,
                                                          int rank, bool shuffle = true,
                                                          uint64_t seed = 0,
                                                          bool drop_last = false);

  // A new size (dataset_size) is refused by throwing, as torch's samplers throw on bad input: the
  // shard layout would change under the loop.
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  // The epoch and the position in it; after load(), the next reset() (the loader's next pass)
  // continues that epoch from that position.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Indices per rank and epoch (DistributedSampler::num_samples()).
  int64_t num_samples() const { return sampler_.num_samples(); }

 private:
  PyTorchDistributedSampler(ddpspawn::DistributedSampler sampler, int64_t dataset_size,
                            int num_replicas, int rank, bool drop_last);

  ddpspawn::DistributedSampler sampler_;
  std::vector<int64_t> indices_;  // this epoch's, made by reset()
  size_t position_ = 0;           // the next index of indices_ to hand out
  bool reset_before_ = false;     // the first reset() keeps the epoch
  bool resume_pending_ = false;   // set by load(), taken by the next reset()
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_DATA_TORCH_DATA_SAMPLER_H_
