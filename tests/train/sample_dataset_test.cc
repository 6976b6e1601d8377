// ReadSamples: a batch of a program's own samples, stacked, read on several threads when asked (the
// threads Get ran on are counted), with errors that name the sample.
#include "core/train/data/sample_dataset.h"

#include <ATen/ATen.h>
#include <torch/data.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/train/data/torch_data_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// Sample i is {[i, i], i}; sample 13 fails, 14 throws, 15 has another shape.
class Numbers : public SampleDataset {
 public:
  int64_t size() const override { return 16; }
  absl::StatusOr<std::vector<at::Tensor>> Get(int64_t i) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads_.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the workers overlap
    if (i == 13) return absl::DataLossError("unreadable");
    if (i == 14) throw std::runtime_error("thrown");
    const double v = static_cast<double>(i);
    return std::vector<at::Tensor>{at::full({i == 15 ? 3 : 2}, v), at::scalar_tensor(v)};
  }
  size_t threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_.size();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> threads_;
};

TEST(ReadSamplesTest, StacksSamplesInOrderOnSeveralThreads) {
  Numbers numbers;
  absl::StatusOr<std::vector<at::Tensor>> batch = ReadSamples(numbers, {3, 0, 7, 5, 1, 2}, 3);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_TRUE(at::equal((*batch)[1], at::tensor({3.0, 0.0, 7.0, 5.0, 1.0, 2.0}).to(at::kFloat)));
  EXPECT_EQ((*batch)[0].sizes(), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(numbers.threads(), 3u);
  Numbers alone;
  ASSERT_TRUE(ReadSamples(alone, {0, 1, 2, 3}, 0).ok());
  EXPECT_EQ(alone.threads(), 1u);
}

TEST(ReadSamplesTest, ErrorsNameTheSample) {
  Numbers numbers;
  EXPECT_THAT(ReadSamples(numbers, {0, 13}, 2).status().message(),
              HasSubstr("sample 13: unreadable"));
  EXPECT_THAT(ReadSamples(numbers, {14, 0}, 1).status().message(), HasSubstr("sample 14: thrown"));
  EXPECT_THAT(ReadSamples(numbers, {0, 15}, 1).status().message(),
              HasSubstr("sample 15 does not stack with sample 0"));
  EXPECT_EQ(ReadSamples(numbers, {16}, 1).status().code(), absl::StatusCode::kOutOfRange);
}

// A torch::data dataset: example i is {[i, i, i], i}.
class Triples : public torch::data::datasets::Dataset<Triples> {
 public:
  torch::data::Example<> get(size_t i) override {
    const double v = static_cast<double>(i);
    return {torch::full({3}, v), torch::scalar_tensor(static_cast<int64_t>(i))};
  }
  torch::optional<size_t> size() const override { return 5; }
};

TEST(ReadSamplesTest, ATorchDataDatasetReadsAsItsExamples) {
  std::shared_ptr<const SampleDataset> triples = FromTorchData(Triples());
  EXPECT_EQ(triples->size(), 5);
  absl::StatusOr<std::vector<at::Tensor>> batch = ReadSamples(*triples, {4, 1}, 2);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(at::equal((*batch)[0],
                        at::tensor({4.0, 4.0, 4.0, 1.0, 1.0, 1.0}).to(at::kFloat).view({2, 3})));
  EXPECT_TRUE(at::equal((*batch)[1], at::tensor({4, 1}, at::kLong)));
}

}  // namespace
}  // namespace ddpspawn
