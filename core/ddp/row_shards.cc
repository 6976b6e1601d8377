// Per-parameter dim-0 shards and their sections (see row_shards.h).
#include "core/ddp/row_shards.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace ddpspawn {
namespace {

at::Tensor AsRows(const at::Tensor& tensor) {
  return tensor.dim() == 0 ? tensor.view({1}) : tensor;
}

}  // namespace

RowRange OwnedRowRange(int64_t rows, int rank, int world) {
  const int64_t per_rank = (rows + world - 1) / world;
  const int64_t begin = std::min(rows, per_rank * rank);
  return {begin, std::min(rows, begin + per_rank)};
}

int64_t RowCount(const at::Tensor& tensor) { return tensor.dim() == 0 ? 1 : tensor.size(0); }

at::Tensor OwnedRows(const at::Tensor& tensor, int rank, int world) {
  at::Tensor rows = AsRows(tensor);
  const RowRange owned = OwnedRowRange(rows.size(0), rank, world);
  return rows.narrow(0, owned.begin, owned.end - owned.begin);
}

SectionLayout::SectionLayout(const std::vector<at::Tensor>& tensors, int world)
    : world_(world), offsets_(tensors.size(), std::vector<int64_t>(world, 0)) {
  std::vector<int64_t> filled(world, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (int r = 0; r < world; ++r) {
      offsets_[i][r] = filled[r];
      filled[r] += OwnedRows(tensors[i], r, world).numel();
    }
  }
  section_elements_ = filled.empty() ? 0 : filled[0];
}

void SectionLayout::Pack(const std::vector<at::Tensor>& tensors, int rank,
                         at::Tensor& section) const {
  int64_t end = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor rows = OwnedRows(tensors[i], rank, world_);
    section.narrow(0, offsets_[i][rank], rows.numel()).copy_(rows.reshape(-1));
    end = offsets_[i][rank] + rows.numel();
  }
  section.narrow(0, end, section_elements_ - end).zero_();
}

void SectionLayout::Scatter(const at::Tensor& tensor, size_t index, at::Tensor& buffer) const {
  for (int r = 0; r < world_; ++r) {
    at::Tensor rows = OwnedRows(tensor, r, world_);
    buffer.narrow(0, r * section_elements_ + offsets_[index][r], rows.numel())
        .copy_(rows.reshape(-1));
  }
}

void SectionLayout::Unpack(const at::Tensor& section, int rank,
                           const std::vector<at::Tensor>& tensors) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor rows = OwnedRows(tensors[i], rank, world_);
    rows.copy_(section.narrow(0, offsets_[i][rank], rows.numel()).view(rows.sizes()));
  }
}

std::vector<at::Tensor> SectionLayout::Views(const at::Tensor& section, int rank,
                                             const std::vector<at::Tensor>& tensors) const {
  std::vector<at::Tensor> views;
  views.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor rows = OwnedRows(tensors[i], rank, world_);
    views.push_back(section.narrow(0, offsets_[i][rank], rows.numel()).view(rows.sizes()));
  }
  return views;
}

}  // namespace ddpspawn
