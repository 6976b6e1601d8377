// PyTorchDistributedSampler through LibTorch's own data loader: each pass reads the next epoch's
// shard of ddpspawn's DistributedSampler (whose indices sampler_test checks against PyTorch's),
// strided, not LibTorch's contiguous ranges; save and load resume mid-epoch; a new size is refused.
#include "core/train/data/torch_data_sampler.h"

#include <torch/data.h>
#include <torch/serialize.h>

#include <cstdint>
#include <vector>

#include "core/train/data/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

// Sample i is the tensor {i}.
class IndexDataset : public torch::data::datasets::Dataset<IndexDataset, torch::Tensor> {
 public:
  explicit IndexDataset(int64_t size) : size_(size) {}
  torch::Tensor get(size_t index) override { return torch::tensor(static_cast<int64_t>(index)); }
  torch::optional<size_t> size() const override { return static_cast<size_t>(size_); }

 private:
  int64_t size_;
};

// Every index the loader hands out in one pass.
template <typename Loader>
std::vector<int64_t> OnePass(Loader& loader) {
  std::vector<int64_t> seen;
  for (const std::vector<torch::Tensor>& batch : loader) {
    for (const torch::Tensor& sample : batch) seen.push_back(sample.item<int64_t>());
  }
  return seen;
}

std::vector<int64_t> Expected(int64_t size, int replicas, int rank, bool shuffle, int64_t epoch) {
  absl::StatusOr<DistributedSampler> sampler =
      DistributedSampler::Create(size, replicas, rank, shuffle, /*seed=*/7);
  EXPECT_TRUE(sampler.ok());
  sampler->set_epoch(epoch);
  return sampler->Indices();
}

TEST(PyTorchDistributedSamplerTest, StridedShardsNotLibTorchsRanges) {
  absl::StatusOr<PyTorchDistributedSampler> sampler =
      PyTorchDistributedSampler::Create(10, 3, 1, /*shuffle=*/false, /*seed=*/7);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  auto loader = torch::data::make_data_loader(IndexDataset(10), *std::move(sampler),
                                              torch::data::DataLoaderOptions(2));
  // PyTorch's: 0..9 padded with 0, 1 to 12, every third from 1.
  EXPECT_THAT(OnePass(*loader), testing::ElementsAre(1, 4, 7, 0));
}

TEST(PyTorchDistributedSamplerTest, EachPassReadsTheNextEpoch) {
  for (int rank = 0; rank < 3; ++rank) {
    absl::StatusOr<PyTorchDistributedSampler> sampler =
        PyTorchDistributedSampler::Create(11, 3, rank, /*shuffle=*/true, /*seed=*/7);
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    auto loader = torch::data::make_data_loader(IndexDataset(11), *std::move(sampler),
                                                torch::data::DataLoaderOptions(3));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      EXPECT_EQ(OnePass(*loader), Expected(11, 3, rank, true, epoch))
          << "rank " << rank << ", epoch " << epoch;
    }
  }
  EXPECT_NE(Expected(11, 3, 0, true, 0), Expected(11, 3, 0, true, 1));
}

TEST(PyTorchDistributedSamplerTest, SaveAndLoadResumeMidEpoch) {
  absl::StatusOr<PyTorchDistributedSampler> first = PyTorchDistributedSampler::Create(20, 2, 0);
  ASSERT_TRUE(first.ok());
  first->set_epoch(4);
  first->reset();
  ASSERT_TRUE(first->next(3).has_value());
  torch::serialize::OutputArchive saved;
  first->save(saved);
  std::stringstream bytes;
  saved.save_to(bytes);

  absl::StatusOr<PyTorchDistributedSampler> second = PyTorchDistributedSampler::Create(20, 2, 0);
  ASSERT_TRUE(second.ok());
  torch::serialize::InputArchive loaded;
  loaded.load_from(bytes);
  second->load(loaded);
  second->reset();  // a loader's next pass continues the loaded epoch
  std::vector<int64_t> rest;
  while (std::optional<std::vector<size_t>> batch = second->next(4)) {
    rest.insert(rest.end(), batch->begin(), batch->end());
  }
  absl::StatusOr<DistributedSampler> plain = DistributedSampler::Create(20, 2, 0);
  ASSERT_TRUE(plain.ok());
  plain->set_epoch(4);
  std::vector<int64_t> all = plain->Indices();
  EXPECT_EQ(rest, std::vector<int64_t>(all.begin() + 3, all.end()));
  EXPECT_EQ(second->epoch(), 4u);
  second->reset();  // and the pass after it reads epoch 5
  EXPECT_EQ(second->epoch(), 5u);
}

TEST(PyTorchDistributedSamplerTest, BadArgumentsAndANewSizeAreRefused) {
  EXPECT_FALSE(PyTorchDistributedSampler::Create(10, 2, 2).ok());
  EXPECT_FALSE(PyTorchDistributedSampler::Create(0, 1, 0).ok());
  absl::StatusOr<PyTorchDistributedSampler> sampler = PyTorchDistributedSampler::Create(10, 2, 0);
  ASSERT_TRUE(sampler.ok());
  EXPECT_THROW(sampler->reset(12), std::invalid_argument);
  EXPECT_NO_THROW(sampler->reset(10));
}

}  // namespace
}  // namespace ddpspawn
