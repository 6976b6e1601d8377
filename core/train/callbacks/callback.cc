// Monitored metrics' modes (see callback.h).
#include "core/train/callbacks/callback.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/util/enum_names.h"

namespace ddpspawn {

constexpr NamedValue<MonitorMode> kMonitorModeNames[] = {
    {"auto", MonitorMode::kAuto},
    {"min", MonitorMode::kMin},
    {"max", MonitorMode::kMax},
};

absl::string_view MonitorModeName(MonitorMode mode) { return NameOf(kMonitorModeNames, mode); }

absl::StatusOr<MonitorMode> ParseMonitorMode(absl::string_view name) {
  return ParseName(kMonitorModeNames, "mode", name);
}

absl::StatusOr<MonitorMode> ResolveMonitorMode(MonitorMode mode, const std::string& metric,
                                               absl::string_view monitor_option,
                                               absl::string_view mode_option) {
  if (mode != MonitorMode::kAuto) return mode;
  if (absl::EndsWith(metric, "accuracy")) return MonitorMode::kMax;
  if (absl::EndsWith(metric, "loss") || absl::EndsWith(metric, "loss_epoch")) {
    return MonitorMode::kMin;
  }
  return absl::InvalidArgumentError(absl::StrCat(monitor_option, "='", metric,
                                                 "': cannot tell whether it improves up or down: "
                                                 "set ",
                                                 mode_option, " to min or max"));
}

absl::Status UnknownMetricError(absl::string_view subject, const std::string& metric,
                                const std::map<std::string, double>& logged) {
  std::string names;
  for (const auto& [name, value] : logged) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  return absl::InvalidArgumentError(absl::StrCat(subject, " '", metric,
                                                 "', which fit does not log (it logs ",
                                                 names.empty() ? "nothing yet" : names, ")"));
}

absl::StatusOr<std::optional<double>> ValueThisEpoch(const CallbackContext& context,
                                                     absl::string_view subject,
                                                     const std::string& metric) {
  const auto found = context.epoch_metrics().find(metric);
  if (found != context.epoch_metrics().end()) return found->second;
  if (context.metrics().count(metric) == 0 &&
      (!context.validates() || context.validated_this_epoch())) {
    return UnknownMetricError(subject, metric, context.metrics());
  }
  return std::nullopt;
}

std::string EncodeStateNumbers(const std::vector<std::pair<std::string, double>>& numbers) {
  std::string state;
  for (const auto& [name, value] : numbers) {
    absl::StrAppendFormat(&state, "%s%s=%.17g", state.empty() ? "" : " ", name, value);
  }
  return state;
}

absl::StatusOr<std::vector<double>> DecodeStateNumbers(absl::string_view state,
                                                       const std::vector<std::string>& names,
                                                       absl::string_view callback) {
  const std::vector<absl::string_view> fields = absl::StrSplit(state, ' ');
  std::vector<double> values(names.size());
  bool ok = fields.size() == names.size();
  for (size_t i = 0; ok && i < names.size(); ++i) {
    const std::string prefix = absl::StrCat(names[i], "=");
    ok = absl::StartsWith(fields[i], prefix) &&
         absl::SimpleAtod(fields[i].substr(prefix.size()), &values[i]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's ", callback, " state '", state, "' is not readable"));
  }
  return values;
}

}  // namespace ddpspawn
