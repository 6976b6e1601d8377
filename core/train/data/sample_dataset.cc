// Reading a batch from a SampleDataset (see sample_dataset.h).
#include "core/train/data/sample_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>
#include <future>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"

namespace ddpspawn {
namespace {

// Samples [begin, end) of `indices` into `out`.
absl::Status ReadRange(const SampleDataset& dataset, const std::vector<int64_t>& indices,
                       size_t begin, size_t end, std::vector<std::vector<at::Tensor>>& out) {
  for (size_t i = begin; i < end; ++i) {
    const int64_t index = indices[i];
    if (index < 0 || index >= dataset.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("sample ", index, " is outside [0, ", dataset.size(), ")"));
    }
    try {
      absl::StatusOr<std::vector<at::Tensor>> sample = dataset.Get(index);
      if (!sample.ok()) {
        return absl::Status(sample.status().code(),
                            absl::StrCat("sample ", index, ": ", sample.status().message()));
      }
      out[i] = *std::move(sample);
    } catch (const std::exception& e) {
      return ExceptionStatus(absl::StrCat("sample ", index), e);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<at::Tensor>> ReadSamples(const SampleDataset& dataset,
                                                    const std::vector<int64_t>& indices,
                                                    int workers) {
  if (indices.empty()) return absl::InvalidArgumentError("a batch needs at least one sample");
  std::vector<std::vector<at::Tensor>> samples(indices.size());
  const size_t threads =
      std::clamp<size_t>(static_cast<size_t>(std::max(workers, 1)), 1, indices.size());
  std::vector<std::future<absl::Status>> parts;
  const size_t per = (indices.size() + threads - 1) / threads;
  for (size_t t = 1; t < threads; ++t) {  // the others on their own threads
    const size_t begin = t * per, end = std::min(indices.size(), begin + per);
    if (begin >= end) break;
    parts.push_back(std::async(std::launch::async, [&, begin, end] {
      return ReadRange(dataset, indices, begin, end, samples);
    }));
  }
  absl::Status status = ReadRange(dataset, indices, 0, std::min(per, indices.size()), samples);
  for (std::future<absl::Status>& part : parts) {
    absl::Status done = part.get();
    if (status.ok()) status = done;
  }
  if (!status.ok()) return status;
  const size_t width = samples[0].size();
  std::vector<at::Tensor> batch;
  for (size_t position = 0; position < width; ++position) {
    std::vector<at::Tensor> column;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples[i].size() != width ||
          samples[i][position].sizes() != samples[0][position].sizes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("sample ", indices[i], " does not stack with sample ", indices[0],
                         ": every sample needs as many tensors, each of the same shape"));
      }
      column.push_back(samples[i][position]);
    }
    batch.push_back(at::stack(column));
  }
  return batch;
}

}  // namespace ddpspawn
