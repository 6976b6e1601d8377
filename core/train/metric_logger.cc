// The loggers (see metric_logger.h): the CSV logger here; TensorBoard's in
// tensorboard_logger.cc.
#include "core/train/metric_logger.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/train/tensorboard_logger.h"
#include "core/util/files.h"

namespace ddpspawn {
namespace {

// metrics.csv (epoch,step,name,value), appended a row at a time, and
// hparams.yaml (name: 'value').
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

absl::StatusOr<std::vector<std::string>> ParseLoggerNames(absl::string_view list) {
  std::vector<std::string> names = absl::StrSplit(list, ',');
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (std::find(std::begin(kLoggerNames), std::end(kLoggerNames), name) ==
        std::end(kLoggerNames)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown logger '", name, "'; the loggers are ", absl::StrJoin(kLoggerNames, ", ")));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("the logger '", name, "' is named twice"));
    }
  }
  return names;
}

absl::StatusOr<std::vector<std::unique_ptr<MetricLogger>>> MakeMetricLoggers(
    const std::vector<std::string>& names, const std::string& dir) {
  std::vector<std::unique_ptr<MetricLogger>> loggers;
  for (const std::string& name : names) {
    if (name == "csv") {
      loggers.push_back(std::make_unique<CsvLogger>(dir));
    } else if (name == "tensorboard") {
      absl::StatusOr<std::unique_ptr<MetricLogger>> logger =
          MakeTensorBoardLogger(dir + "/tensorboard");
      if (!logger.ok()) return logger.status();
      loggers.push_back(*std::move(logger));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown logger '", name, "'"));
    }
  }
  return loggers;
}

}  // namespace ddpspawn
