// libFuzzer target: the CSV and .npy loaders. The first two bytes pick the loader and the CSV
// options (label column, header, delimiter, label type); the rest is the file, read through a
// memfd. A loaded dataset must keep the loaders' promises: as many labels as samples, and finite
// float32 features.
#include <ATen/ATen.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/train/data/dataset.h"

namespace {

// A file holding `bytes`, named by /proc/self/fd; -1 when it cannot be made.
int MemoryFile(const uint8_t* bytes, size_t size) {
  const int fd = memfd_create("data_fuzzer", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, bytes + written, size - written);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    written += static_cast<size_t>(n);
  }
  return fd;
}

void CheckDataset(const ddpspawn::Dataset& data) {
  if (data.features.scalar_type() != at::kFloat || data.features.dim() < 1 ||
      data.features.size(0) != data.labels.size(0) ||
      !at::isfinite(data.features).all().item<bool>()) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t loader = data[0], csv = data[1];
  const int fd = MemoryFile(data + 2, size - 2);
  if (fd < 0) return 0;
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  if (loader & 1) {
    absl::StatusOr<at::Tensor> array = ddpspawn::LoadNpy(path);
    if (array.ok()) (void)array->sum();  // reads every element
    absl::StatusOr<ddpspawn::Dataset> dataset = ddpspawn::LoadNpyDataset(path, path);
    if (dataset.ok()) CheckDataset(*dataset);
  } else {
    ddpspawn::CsvOptions options;
    constexpr int kLabelColumns[] = {-1, 0, 1, -2};
    options.label_column = kLabelColumns[(loader >> 1) & 3];
    options.header = static_cast<ddpspawn::CsvOptions::Header>(((loader >> 3) & 3) % 3);
    constexpr char kDelimiters[] = {',', ';', '\t', ' '};
    options.delimiter = kDelimiters[csv & 3];
    options.label_type = static_cast<ddpspawn::LabelType>(((csv >> 2) & 3) % 3);
    absl::StatusOr<ddpspawn::Dataset> dataset = ddpspawn::LoadCsvDataset(path, options);
    if (dataset.ok()) CheckDataset(*dataset);
  }
  close(fd);
  return 0;
}
