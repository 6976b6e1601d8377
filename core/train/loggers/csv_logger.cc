// The CSV logger (see csv_logger.h).
#include "core/train/loggers/csv_logger.h"

#include <cstdint>
#include <map>
#include <utility>

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

}  // namespace ddpspawn
