// A dataset a C++ program implements for the Trainer (Lightning's map-style Dataset): its size and
// one sample by index. The Trainer shards the indices with its DistributedSampler, and reads each
// batch's samples on TrainerOptions::num_workers threads. torch_data_dataset.h adapts a torch::data
// dataset.
#ifndef DDPSPAWN_CORE_TRAIN_DATA_SAMPLE_DATASET_H_
#define DDPSPAWN_CORE_TRAIN_DATA_SAMPLE_DATASET_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpspawn {

// Thread safety: Get() is called from several threads at once (the loading workers), so it must be
// safe to call concurrently; size() must not change.
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  // Sample `index` in [0, size()): its tensors, e.g. {features, label}; every sample has as many,
  // each shaped alike, so that they stack into a batch.
  virtual absl::StatusOr<std::vector<at::Tensor>> Get(int64_t index) const = 0;
};

// The samples at `indices` of `dataset`, stacked position by position into a batch ({features [n,
// ...], labels [n, ...]}), read on `workers` threads (0 or 1: this thread). An error (or an
// exception) from Get names the index; samples that do not stack are an error naming the first that
// differs.
absl::StatusOr<std::vector<at::Tensor>> ReadSamples(const SampleDataset& dataset,
                                                    const std::vector<int64_t>& indices,
                                                    int workers);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_DATA_SAMPLE_DATASET_H_
