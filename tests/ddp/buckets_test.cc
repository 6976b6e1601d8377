// Bucket assignment, and the reducer starting buckets in bucket order whatever order gradients
// become ready in (in-process, world size 1).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/comm/process_group.h"
#include "core/ddp/reducer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

constexpr size_t kKiB = 1024;

TEST(AssignBucketsTest, ManySmallAndOneLargerThanTheCap) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(51);
  for (int i = 0; i < 50; ++i) tensors.push_back(at::zeros({64}));  // 256 B each
  tensors.insert(tensors.begin() + 20, at::zeros({4096}));          // 16 KiB, over the cap
  const size_t first_cap = 1 * kKiB, cap = 4 * kKiB;
  std::vector<std::vector<size_t>> buckets = AssignBuckets(tensors, first_cap, cap);

  std::multiset<size_t> seen;
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_t bytes = 0;
    for (size_t i : buckets[b]) {
      seen.insert(i);
      bytes += tensors[i].nbytes();
    }
    if (buckets[b].size() > 1) {  // only a lone tensor may exceed its cap
      EXPECT_LE(bytes, b == 0 ? first_cap : cap) << "bucket " << b;
    }
  }
  EXPECT_EQ(seen.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  // The large tensor is alone; the first bucket holds the last-registered tensors.
  auto large = std::find_if(buckets.begin(), buckets.end(), [](const std::vector<size_t>& b) {
    return std::find(b.begin(), b.end(), 20) != b.end();
  });
  ASSERT_NE(large, buckets.end());
  EXPECT_THAT(*large, testing::ElementsAre(20));
  EXPECT_EQ(buckets.front().front(), tensors.size() - 1);
  EXPECT_EQ(buckets.front().size(), 4u);  // 4 x 256 B reach the 1 KiB first cap
  for (size_t b = 1; b < buckets.size(); ++b) {
    EXPECT_GT(buckets[b - 1].front(), buckets[b].front()) << "buckets in reverse order";
  }
}

TEST(AssignBucketsTest, OneDtypePerBucket) {
  std::vector<at::Tensor> tensors = {at::zeros({4}), at::zeros({4}, at::kDouble), at::zeros({4}),
                                     at::zeros({4}, at::kDouble)};
  for (const std::vector<size_t>& bucket : AssignBuckets(tensors, kKiB, kKiB)) {
    for (size_t i : bucket) {
      EXPECT_EQ(tensors[i].scalar_type(), tensors[bucket.front()].scalar_type());
    }
  }
}

TEST(ReducerTest, BucketsStartInOrderWhateverTheReadyOrder) {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Create(ClusterInfo{});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<at::Tensor> buffers;
  buffers.reserve(12);
  for (int i = 0; i < 12; ++i) buffers.push_back(at::full({256}, static_cast<float>(i)));
  ReducerOptions options;
  options.bucket_cap_mb = 2.0 / 1024;  // 2 KiB: two buffers per bucket
  options.first_bucket_cap_mb = 1.0 / 1024;
  absl::StatusOr<std::unique_ptr<Reducer>> reducer =
      Reducer::Create(group->get(), buffers, options, /*autograd_mode=*/false);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  ASSERT_GT((*reducer)->bucket_count(), 3u);
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937 rng(5);
  for (int iteration = 0; iteration < 3; ++iteration) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) ASSERT_TRUE((*reducer)->MarkReady(i).ok());
    ASSERT_TRUE((*reducer)->Finalize().ok());
    std::vector<int> log = (*reducer)->TakeLaunchLog();
    ASSERT_EQ(log.size(), (*reducer)->bucket_count());
    for (size_t b = 0; b < log.size(); ++b) EXPECT_EQ(log[b], static_cast<int>(b));
  }
  for (int i = 0; i < 12; ++i) EXPECT_EQ(buffers[i][0].item<float>(), i);  // mean over 1 rank
  EXPECT_EQ((*reducer)->MarkReady(0).code(), absl::StatusCode::kOk);
  EXPECT_EQ((*reducer)->MarkReady(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*reducer)->MarkReady(99).code(), absl::StatusCode::kInvalidArgument);
}

// A hook that throws LibTorch's error.
class ThrowingHook : public CommHook {
 public:
  std::string name() const override { return "throwing"; }
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup&, GradBucket&) override {
    C10_THROW_ERROR(NotImplementedError, "this hook cannot reduce");
  }
};

// The reducer's status has the hook's message and code, not LibTorch's C++ backtrace (was:
// Internal, with "Exception raised from ... frame #0 ...").
TEST(ReducerTest, AHooksLibTorchErrorIsItsMessage) {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Create(ClusterInfo{});
  ASSERT_TRUE(group.ok()) << group.status();
  ReducerOptions options;
  options.comm_hook = std::make_shared<ThrowingHook>();
  absl::StatusOr<std::unique_ptr<Reducer>> reducer =
      Reducer::Create(group->get(), {at::ones({4})}, options, /*autograd_mode=*/false);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  const absl::Status status = (*reducer)->MarkReady(0);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(),
              testing::HasSubstr("communication hook 'throwing': this hook cannot reduce"));
  EXPECT_THAT(status.message(), testing::Not(testing::HasSubstr("Exception raised from")));
}

}  // namespace
}  // namespace ddpspawn
