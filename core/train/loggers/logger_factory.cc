// The loggers by name (see logger_factory.h).
#include "core/train/loggers/logger_factory.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/train/loggers/csv_logger.h"
#include "core/train/loggers/tensorboard_logger.h"

namespace ddpspawn {

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
      loggers.push_back(MakeCsvLogger(dir));
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
