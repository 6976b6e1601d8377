// FSDP2's per-parameter sharding on dim 0: rank r of W owns rows [r·c, (r+1)·c) of every tensor, c
// = ceil(rows / W), clipped to the tensor (later ranks may own fewer rows, or none); a 0-dim tensor
// counts as one row. A section is one rank's rows of a list of tensors, flat and back to back; rank
// 0's is the largest, and a collective buffer holds W sections of that size (the rest zero
// padding), rank-major, as reduce-scatter and all-gather into one tensor want them.
#ifndef DDPSPAWN_CORE_DDP_ROW_SHARDS_H_
#define DDPSPAWN_CORE_DDP_ROW_SHARDS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ddpspawn {

// Rows [begin, end) of a tensor of `rows` rows, those that `rank` of `world` owns.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};
RowRange OwnedRowRange(int64_t rows, int rank, int world);
// The rows `tensor` is split into: its first dimension, or 1 for a 0-dim tensor.
int64_t RowCount(const at::Tensor& tensor);

// The rows of `tensor` that `rank` of `world` owns: a view (shape [rows, ...]) sharing its storage;
// contiguous when `tensor` is.
at::Tensor OwnedRows(const at::Tensor& tensor, int rank, int world);

// Where each tensor's owned rows start in each rank's section. Plain values; thread-compatible.
class SectionLayout {
 public:
  SectionLayout(const std::vector<at::Tensor>& tensors, int world);

  int world() const { return world_; }
  // Elements of the largest (rank 0's) section: a collective buffer holds world() of them.
  int64_t section_elements() const { return section_elements_; }
  // Offset of tensor `index`'s rows in `rank`'s section.
  int64_t offset(size_t index, int rank) const { return offsets_[index][rank]; }

  // Copies `rank`'s rows of each tensor into `section` (section_elements(), flat) and zeroes the
  // padding after them.
  void Pack(const std::vector<at::Tensor>& tensors, int rank, at::Tensor& section) const;
  // Copies every rank's rows of `tensor` (tensors[index] of the constructor's list, or one shaped
  // like it) into its place in each rank's section of `buffer` (world() sections, rank-major).
  void Scatter(const at::Tensor& tensor, size_t index, at::Tensor& buffer) const;
  // Copies `section` (as Pack() wrote it for `rank`) into `rank`'s rows of each tensor.
  void Unpack(const at::Tensor& section, int rank, const std::vector<at::Tensor>& tensors) const;
  // Views of `section`, shaped like `rank`'s rows of each tensor.
  std::vector<at::Tensor> Views(const at::Tensor& section, int rank,
                                const std::vector<at::Tensor>& tensors) const;

 private:
  int world_;
  std::vector<std::vector<int64_t>> offsets_;  // [tensor][rank]
  int64_t section_elements_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_ROW_SHARDS_H_
