// A torch::data map-style dataset (get(index) returning an Example: data and target) as a
// SampleDataset, for the Trainer.
#ifndef DDPSPAWN_CORE_TRAIN_DATA_TORCH_DATA_DATASET_H_
#define DDPSPAWN_CORE_TRAIN_DATA_TORCH_DATA_DATASET_H_

#include <memory>
#include <utility>
#include <vector>

#include "core/train/data/sample_dataset.h"

namespace ddpspawn {

// Thread safety: Get() calls the dataset's get() from the loading workers' threads at once, as a
// torch::data loader with workers does; get() must allow it.
template <typename TorchDataset>
class TorchDataDataset : public SampleDataset {
 public:
  explicit TorchDataDataset(TorchDataset dataset) : dataset_(std::move(dataset)) {}
  int64_t size() const override { return static_cast<int64_t>(dataset_.size().value_or(0)); }
  absl::StatusOr<std::vector<at::Tensor>> Get(int64_t index) const override {
    auto example = dataset_.get(static_cast<size_t>(index));
    return std::vector<at::Tensor>{example.data, example.target};
  }

 private:
  mutable TorchDataset dataset_;  // torch::data's get() is not const
};

template <typename TorchDataset>
std::shared_ptr<const SampleDataset> FromTorchData(TorchDataset dataset) {
  return std::make_shared<TorchDataDataset<TorchDataset>>(std::move(dataset));
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_DATA_TORCH_DATA_DATASET_H_
