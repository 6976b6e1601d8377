// PyTorchDistributedSampler (see torch_data_sampler.h).
#include "core/train/data/torch_data_sampler.h"

#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/env/cluster_environment.h"

namespace ddpspawn {

absl::StatusOr<PyTorchDistributedSampler> PyTorchDistributedSampler::Create(
    int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed, bool drop_last) {
  // In a rank of a job, a sharded sampler must deal to that job's ranks: another world size or rank
  // would silently skip or repeat samples. One replica (every sample, e.g. rank 0 evaluating alone)
  // is a choice, not a shard.
  if (absl::StatusOr<ClusterInfo> job = DetectClusterEnvironment();
      num_replicas > 1 && job.ok() && job->world_size > 1 &&
      (num_replicas != job->world_size || rank != job->rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PyTorchDistributedSampler for rank ", rank, " of ", num_replicas, " replicas in rank ",
        job->rank, " of a job of ", job->world_size,
        ": the ranks would skip or repeat samples; pass the strategy's world_size() and "
        "global_rank() (distributed_sampler_kwargs())"));
  }
  absl::StatusOr<ddpspawn::DistributedSampler> sampler = ddpspawn::DistributedSampler::Create(
      dataset_size, num_replicas, rank, shuffle, seed, drop_last);
  if (!sampler.ok()) return sampler.status();
  return PyTorchDistributedSampler(*std::move(sampler), dataset_size, num_replicas, rank,
                                   drop_last);
}

PyTorchDistributedSampler::PyTorchDistributedSampler(ddpspawn::DistributedSampler sampler,
                                                     int64_t dataset_size, int num_replicas,
                                                     int rank, bool drop_last)
    : torch::data::samplers::DistributedSampler<>(static_cast<size_t>(dataset_size),
                                                  static_cast<size_t>(num_replicas),
                                                  static_cast<size_t>(rank),
                                                  /*allow_duplicates=*/!drop_last),
      sampler_(sampler) {}

void PyTorchDistributedSampler::reset(std::optional<size_t> new_size) {
  if (new_size.has_value() && *new_size != size_) {
    throw std::invalid_argument(absl::StrCat("PyTorchDistributedSampler: the dataset has ",
                                             *new_size, " samples now, not ", size_,
                                             "; make a sampler for the new size"));
  }
  if (resume_pending_) {  // load()'s epoch and position stand
    resume_pending_ = false;
    return;
  }
  if (reset_before_) ++epoch_;
  reset_before_ = true;
  sampler_.set_epoch(static_cast<int64_t>(epoch_));
  indices_ = sampler_.Indices();
  position_ = 0;
}

std::optional<std::vector<size_t>> PyTorchDistributedSampler::next(size_t batch_size) {
  if (!reset_before_) reset();  // a loop that reads before any reset() reads the first epoch
  if (position_ >= indices_.size()) return std::nullopt;
  const size_t end = position_ + std::min(batch_size, indices_.size() - position_);
  std::vector<size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                            indices_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

void PyTorchDistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(static_cast<int64_t>(epoch_)), /*is_buffer=*/true);
  archive.write("position", torch::tensor(static_cast<int64_t>(position_)), /*is_buffer=*/true);
}

void PyTorchDistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch = torch::empty({}, torch::kInt64);
  torch::Tensor position = torch::empty({}, torch::kInt64);
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  epoch_ = static_cast<size_t>(epoch.item<int64_t>());
  sampler_.set_epoch(static_cast<int64_t>(epoch_));
  indices_ = sampler_.Indices();
  position_ = std::min(static_cast<size_t>(position.item<int64_t>()), indices_.size());
  reset_before_ = true;
  resume_pending_ = true;
}

}  // namespace ddpspawn
