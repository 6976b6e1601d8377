// Datasets for training: in memory, loading features and labels from NumPy .npy files or from a
// numeric CSV file, and splitting a dataset in two; or a C++ program's own SampleDataset.
#ifndef DDPSPAWN_CORE_TRAIN_DATA_DATASET_H_
#define DDPSPAWN_CORE_TRAIN_DATA_DATASET_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/train/data/sample_dataset.h"

namespace ddpspawn {

// Plain values; thread-compatible. Copies and SplitDataset's parts share the tensors' storage
// (at::Tensor handles).
struct Dataset {
  // [n, ...] float32 (converted from whatever the file holds).
  at::Tensor features;
  // [n] int64 for classification, or [n] / [n, k] float32 for regression.
  at::Tensor labels;
  // File name(s), for messages.
  std::string source;
  // A C++ program's own samples (sample_dataset.h): when set, the Trainer reads every batch from
  // it, and features and labels are not used.
  std::shared_ptr<const SampleDataset> samples;

  int64_t size() const { return samples != nullptr ? samples->size() : features.size(0); }
};

// A Dataset of a program's own samples, named `source` in messages.
inline Dataset FromSamples(std::shared_ptr<const SampleDataset> samples, std::string source) {
  Dataset dataset;
  dataset.samples = std::move(samples);
  dataset.source = std::move(source);
  return dataset;
}

// Reads one array from a .npy file (NumPy format versions 1.0, 2.0 and 3.0), C order and
// little-endian only. Supported dtypes: '<f4', '<f8', '|i1', '<i2', '<i4', '<i8', '|u1' and '|b1';
// the tensor keeps the file's dtype. NotFound when the file cannot be opened; InvalidArgument,
// naming the file and what is wrong, for anything else (bad magic, unsupported version or dtype,
// fortran_order True, big-endian data, a malformed header, or a data size that does not match the
// shape).
absl::StatusOr<at::Tensor> LoadNpy(const std::string& path);

// What labels become.
enum class LabelType {
  // int64 when every label is an integer (for CSV, an integral value such as "1.0", as np.savetxt
  // writes it; for .npy, an integer or bool dtype), float32 otherwise.
  kAuto,
  // int64 (class indices): a label that is not an integral value is an error naming the file and
  // row.
  kInt64,
  kFloat32,
};

// Features and labels from two .npy files with the same first dimension. Features (at least 1-D)
// are converted to float32. Labels: with kAuto, integer and bool dtypes become int64 and must be
// [n] (or [n, 1], which is flattened to [n]); float dtypes become float32 and may be [n] or [n, k].
// kInt64 takes float labels of integral values too; kFloat32 converts integer labels. A NaN or
// infinite value, or one outside float32's range, in the features or float labels is an error
// naming the file and the element.
absl::StatusOr<Dataset> LoadNpyDataset(const std::string& features_path,
                                       const std::string& labels_path,
                                       LabelType label_type = LabelType::kAuto);

struct CsvOptions {
  // Which column holds the label, counted from 0; negative values count from the end (-1: the last
  // column).
  int label_column = -1;
  // kAuto: the first row is a header when one of its fields is not a number.
  enum class Header { kAuto, kYes, kNo } header = Header::kAuto;
  char delimiter = ',';
  using LabelType = ::ddpspawn::LabelType;
  LabelType label_type = LabelType::kAuto;
};

// A numeric CSV file: one row per sample, one column the label, the others the features ([n,
// columns - 1] float32). Fields are trimmed of spaces and may be double-quoted; blank lines are
// skipped. Errors name the file and the line (and column) of a field that is not a number, that is
// NaN or infinite (1e400 included), or that is outside float32's range, or of a row with a
// different number of fields; a file without data rows is an error.
absl::StatusOr<Dataset> LoadCsvDataset(const std::string& path, const CsvOptions& options = {});

// The first `count` rows and the rest, e.g. for a train/test split; `count` must be in [0, size()].
// The parts are views of the dataset's tensors (no copy) and their sources say which rows they
// hold.
absl::StatusOr<std::pair<Dataset, Dataset>> SplitDataset(const Dataset& dataset, int64_t count);

// The batch (features, labels) of samples [begin, end) of `indices`: from memory, or read from the
// program's own dataset on `workers` threads; an error names the dataset's source.
absl::StatusOr<std::vector<at::Tensor>> ReadBatch(const Dataset& data,
                                                  const std::vector<int64_t>& indices,
                                                  int64_t begin, int64_t end, int workers);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_DATA_DATASET_H_
