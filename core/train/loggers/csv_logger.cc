// The CSV logger (see csv_logger.h).
#include "core/train/loggers/csv_logger.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/util/files.h"

namespace ddpspawn {
namespace {

// metrics.csv (epoch,step,name,value), appended a row at a time, and hparams.yaml (name: 'value').
class CsvLogger : public MetricLogger {
 public:
  explicit CsvLogger(std::string dir) : dir_(std::move(dir)) {}

  absl::Status LogHyperparameters(const std::map<std::string, std::string>& params) override {
    std::string yaml;
    for (const auto& [name, value] : params) {
      absl::StrAppend(&yaml, name, ": '", absl::StrReplaceAll(value, {{"'", "''"}}), "'\n");
    }
    return WriteFileAtomically(dir_ + "/hparams.yaml", yaml, /*durable=*/false, 0644);
  }

  absl::Status LogMetric(int64_t epoch, int64_t step, const std::string& name,
                         double value) override {
    // Never through a link (a metrics.csv planted in a shared directory).
    return AppendToFile(dir_ + "/metrics.csv",
                        absl::StrFormat("%d,%d,%s,%.9g\n", epoch, step, name, value),
                        "epoch,step,name,value\n");
  }

 private:
  const std::string dir_;
};

}  // namespace

std::unique_ptr<MetricLogger> MakeCsvLogger(const std::string& dir) {
  return std::make_unique<CsvLogger>(dir);
}

absl::Status CheckMetricNames(const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [name, value] : values) {
    if (name.empty() || name.find_first_of(",\"\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the metric name '", name,
          "' cannot be a metrics.csv column value: it is empty or holds a comma, a quote or a "
          "line break"));
    }
  }
  return absl::OkStatus();
}

absl::Status AppendMetricRows(const std::string& dir, int64_t epoch, int64_t step,
                              const std::vector<std::pair<std::string, double>>& values) {
  if (absl::Status names = CheckMetricNames(values); !names.ok()) return names;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make the log directory ", dir, ": ", error.message()));
  }
  CsvLogger logger(dir);
  for (const auto& [name, value] : values) {
    if (absl::Status status = logger.LogMetric(epoch, step, name, value); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
