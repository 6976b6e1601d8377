// DistributedSampler (see sampler.h), index for index the same as PyTorch's.
#include "core/train/data/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ddpspawn {

int64_t BatchCount(int64_t samples, int64_t batch_size) {
  return samples / batch_size + (samples % batch_size != 0 ? 1 : 0);
}

int64_t BatchEnd(int64_t batch, int64_t batch_size, int64_t samples) {
  const int64_t begin = batch * batch_size;  // < samples, so no overflow
  return begin + std::min(batch_size, samples - begin);
}

absl::StatusOr<DistributedSampler> DistributedSampler::Create(int64_t dataset_size,
                                                              int num_replicas, int rank,
                                                              bool shuffle, uint64_t seed,
                                                              bool drop_last) {
  if (num_replicas < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: num_replicas must be at least 1, not ", num_replicas));
  if (rank < 0 || rank >= num_replicas)
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: rank ", rank, " is out of range for ", num_replicas, " replicas"));
  if (dataset_size < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: the dataset is empty (size ", dataset_size, ")"));
  if (drop_last && dataset_size < num_replicas)
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: with drop_last, a dataset of ", dataset_size,
                     " samples leaves some of the ", num_replicas, " replicas without a sample"));
  DistributedSampler sampler(dataset_size, num_replicas, rank, shuffle, seed, drop_last);
  sampler.num_samples_ = DealtPerRank(dataset_size, num_replicas, drop_last);
  return sampler;
}

int64_t DistributedSampler::DealtPerRank(int64_t samples, int num_replicas, bool drop_last) {
  // PyTorch: ceil((n - R) / R) with drop_last when R does not divide n, which is floor(n / R);
  // ceil(n / R) otherwise.
  return drop_last ? samples / num_replicas : BatchCount(samples, num_replicas);
}

absl::Status DistributedSampler::set_start(int64_t start) {
  if (start < 0 || start > dataset_size_) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: start ", start,
                                                   " is outside the epoch's order [0, ",
                                                   dataset_size_, "]"));
  }
  start_ = start;
  num_samples_ = DealtPerRank(dataset_size_ - start, num_replicas_, drop_last_);
  return absl::OkStatus();
}

int64_t EpochPositionAfter(int64_t dataset_size, int64_t start, int num_replicas, bool drop_last,
                           int64_t taken_per_rank) {
  const int64_t rest = dataset_size - start;
  const int64_t dealt = DistributedSampler::DealtPerRank(rest, num_replicas, drop_last);
  const int64_t taken = std::min(std::max<int64_t>(taken_per_rank, 0), dealt) * num_replicas;
  // Padding past the end repeats samples taken already; drop_last's tail waits for the next epoch.
  return start + (drop_last && taken == dealt * num_replicas ? rest : std::min(taken, rest));
}

std::vector<int64_t> DistributedSampler::Indices() const {
  std::vector<int64_t> order(dataset_size_);
  if (shuffle_) {
    // torch.Generator().manual_seed(seed + epoch); the sum wraps mod 2^64.
    at::Generator generator = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
    at::Tensor permutation = at::randperm(dataset_size_, generator, at::TensorOptions(at::kLong));
    const int64_t* data = permutation.data_ptr<int64_t>();
    order.assign(data, data + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  order.erase(order.begin(), order.begin() + start_);
  const auto dealt = static_cast<int64_t>(order.size());
  // Pad by repeating from the start (cyclically if the padding is longer than the order, as PyTorch
  // does), or truncate for drop_last.
  const int64_t total = total_size();
  order.reserve(total);
  for (int64_t i = dealt; i < total; ++i) order.push_back(order[i % dealt]);
  order.resize(total);

  std::vector<int64_t> indices;
  indices.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += num_replicas_) indices.push_back(order[i]);
  return indices;
}

}  // namespace ddpspawn
