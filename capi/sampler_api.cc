// ddpspawn_distributed_sampler_indices: the core's DistributedSampler (PyTorch's, index for index)
// behind the C ABI, for front ends without torch.utils.data.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "capi/status.h"
#include "core/train/data/sampler.h"
#include "ddpspawn/ddpspawn.h"

namespace ddpspawn::capi {
namespace {

absl::Status SamplerIndices(int64_t dataset_size, int32_t num_replicas, int32_t rank,
                            int32_t shuffle, uint64_t seed, int32_t drop_last, int64_t epoch,
                            int64_t* out_indices, size_t capacity, size_t* out_count) {
  if (out_count == nullptr) return absl::InvalidArgumentError("out_count is NULL");
  if (epoch < 0) return absl::InvalidArgumentError(absl::StrCat("epoch ", epoch, " is negative"));
  absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(
      dataset_size, num_replicas, rank, shuffle != 0, seed, drop_last != 0);
  if (!sampler.ok()) return sampler.status();
  const auto count = static_cast<size_t>(sampler->num_samples());
  if (out_indices == nullptr) {
    if (capacity != 0) return absl::InvalidArgumentError("out_indices is NULL, capacity is not 0");
    *out_count = count;
    return absl::OkStatus();
  }
  if (capacity < count) {
    return absl::InvalidArgumentError(
        absl::StrCat("out_indices holds ", capacity, " indices; rank ", rank, " reads ", count));
  }
  sampler->set_epoch(epoch);
  const std::vector<int64_t> indices = sampler->Indices();
  std::copy(indices.begin(), indices.end(), out_indices);
  *out_count = count;
  return absl::OkStatus();
}

}  // namespace
}  // namespace ddpspawn::capi

extern "C" ddpspawn_status ddpspawn_distributed_sampler_indices(
    int64_t dataset_size, int32_t num_replicas, int32_t rank, int32_t shuffle, uint64_t seed,
    int32_t drop_last, int64_t epoch, int64_t* out_indices, size_t capacity, size_t* out_count) {
  return ddpspawn::capi::StatusCodeOf([&] {
    return ddpspawn::capi::SamplerIndices(dataset_size, num_replicas, rank, shuffle, seed,
                                          drop_last, epoch, out_indices, capacity, out_count);
  });
}
