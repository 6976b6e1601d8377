// FitResult's text form (see fit_result.h).
#include "core/train/loop/fit_result.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

std::string FitResult::Encode() const {
  std::string text = absl::StrCat("checkpoint=", checkpoint, "\nmetrics_csv=", metrics_csv,
                                  "\nepoch=", epoch, "\nglobal_step=", global_step, "\n");
  if (!stopped_by.empty()) absl::StrAppend(&text, "stopped_by=", stopped_by, "\n");
  if (!optimizer_state_bytes.empty()) {
    absl::StrAppend(&text, "optimizer_state_bytes=", absl::StrJoin(optimizer_state_bytes, ","),
                    "\n");
  }
  if (!peak_tensor_bytes.empty()) {
    absl::StrAppend(&text, "peak_tensor_bytes=", absl::StrJoin(peak_tensor_bytes, ","), "\n");
  }
  if (!parameter_bytes.empty()) {
    absl::StrAppend(&text, "parameter_bytes=", absl::StrJoin(parameter_bytes, ","), "\n");
  }
  if (full_shard_units > 0) absl::StrAppend(&text, "full_shard_units=", full_shard_units, "\n");
  for (const auto& [name, value] : metrics) {
    absl::StrAppendFormat(&text, "metric.%s=%.17g\n", name, value);
  }
  for (const auto& [key, value] : straggler.ToPairs()) {
    absl::StrAppend(&text, key, "=", value, "\n");
  }
  return text;
}

absl::StatusOr<FitResult> FitResult::Decode(const std::string& text) {
  FitResult result;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad fit result line '", line, "'"));
    }
    absl::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    bool ok = true;
    if (key == "checkpoint") {
      result.checkpoint = std::string(value);
    } else if (key == "metrics_csv") {
      result.metrics_csv = std::string(value);
    } else if (key == "epoch") {
      ok = absl::SimpleAtoi(value, &result.epoch);
    } else if (key == "global_step") {
      ok = absl::SimpleAtoi(value, &result.global_step);
    } else if (key == "full_shard_units") {
      ok = absl::SimpleAtoi(value, &result.full_shard_units);
    } else if (key == "stopped_by") {
      result.stopped_by = std::string(value);
    } else if (key == "optimizer_state_bytes") {
      for (absl::string_view bytes : absl::StrSplit(value, ',')) {
        ok = ok && absl::SimpleAtoi(bytes, &result.optimizer_state_bytes.emplace_back());
      }
    } else if (key == "peak_tensor_bytes" || key == "parameter_bytes") {
      std::vector<int64_t>& by_rank =
          key == "parameter_bytes" ? result.parameter_bytes : result.peak_tensor_bytes;
      for (absl::string_view bytes : absl::StrSplit(value, ',')) {
        ok = ok && absl::SimpleAtoi(bytes, &by_rank.emplace_back());
      }
    } else if (absl::StartsWith(key, "metric.")) {
      ok = absl::SimpleAtod(value, &result.metrics[std::string(key.substr(7))]);
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad fit result line '", line, "'"));
  }
  return result;
}

}  // namespace ddpspawn
