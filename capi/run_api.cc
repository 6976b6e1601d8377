// The C ABI of training runs: the CLI's options as key=value strings, ranks forked from the caller.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "capi/rank_report.h"
#include "capi/status.h"
#include "core/train/run/run.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn.h"

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;

struct ddpspawn_run_result {
  std::string text;
  // In the run's order; a key given twice keeps its last value.
  std::vector<std::pair<std::string, std::string>> pairs;
};

namespace {

// How the ranks of this thread's last ddpspawn_run ended (per thread, like ddpspawn_last_error()).
struct LastRun {
  int failed_rank = -1;
  std::vector<ddpspawn::RankOutcome> outcomes;
};
thread_local LastRun t_last_run;

absl::Status CheckLastRunRank(int32_t rank) {
  const int n = static_cast<int>(t_last_run.outcomes.size());
  if (rank < 0 || rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ", n, ") of this thread's last ddpspawn_run"));
  }
  return absl::OkStatus();
}

// A run's key=value lines as a result; a key given twice keeps its last value.
std::unique_ptr<ddpspawn_run_result> ParseResult(const std::string& text) {
  auto result = std::make_unique<ddpspawn_run_result>();
  result->text = text;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    std::string key(line.substr(0, eq));
    auto same = std::find_if(result->pairs.begin(), result->pairs.end(),
                             [&key](const auto& pair) { return pair.first == key; });
    if (same != result->pairs.end()) result->pairs.erase(same);
    result->pairs.emplace_back(std::move(key), std::string(line.substr(eq + 1)));
  }
  return result;
}

}  // namespace

extern "C" {

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_run(const char* command, const char* const* options,
                                             ddpspawn_run_result** out_result) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(command, "command"));
    RETURN_IF_ERROR(NotNull(out_result, "out_result"));
    t_last_run = LastRun{};
    ddpspawn::RunOptions parsed;
    bool has_start_method = false;
    for (const char* const* option = options; option != nullptr && *option != nullptr; ++option) {
      std::string entry = *option;
      size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("option '", entry, "' is not of the form key=value"));
      }
      std::string key = entry.substr(0, eq);
      if (key == "start_method" || key == "start-method") {
        has_start_method = true;
        if (entry.substr(eq + 1) != "fork") {
          return absl::InvalidArgumentError(
              "ddpspawn_run forks its ranks (start_method=fork): spawn and forkserver would run "
              "the calling program again; use the ddpspawn CLI for those start methods");
        }
      }
      parsed.emplace_back(key, entry.substr(eq + 1));
    }
    if (!has_start_method && absl::string_view(command) != "export") {
      parsed.emplace_back("start_method", "fork");
    }
    ddpspawn::RunReport report;
    absl::Status status = ddpspawn::Run(command, parsed, &report);
    t_last_run.failed_rank = report.failed_rank;
    t_last_run.outcomes = std::move(report.outcomes);
    if (!status.ok()) return status;
    *out_result = ParseResult(report.result).release();
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT void ddpspawn_run_result_destroy(ddpspawn_run_result* result) { delete result; }

DDPSPAWN_EXPORT const char* ddpspawn_run_result_get(const ddpspawn_run_result* result,
                                                    const char* key) {
  if (result == nullptr || key == nullptr) return nullptr;
  for (const auto& [name, value] : result->pairs) {
    if (name == key) return value.c_str();
  }
  return nullptr;
}

DDPSPAWN_EXPORT const char* ddpspawn_run_result_text(const ddpspawn_run_result* result) {
  return result == nullptr ? "" : result->text.c_str();
}

DDPSPAWN_EXPORT size_t ddpspawn_run_result_count(const ddpspawn_run_result* result) {
  return result == nullptr ? 0 : result->pairs.size();
}

DDPSPAWN_EXPORT const char* ddpspawn_run_result_key(const ddpspawn_run_result* result,
                                                    size_t index) {
  if (result == nullptr || index >= result->pairs.size()) return nullptr;
  return result->pairs[index].first.c_str();
}

DDPSPAWN_EXPORT const char* ddpspawn_run_result_value(const ddpspawn_run_result* result,
                                                      size_t index) {
  if (result == nullptr || index >= result->pairs.size()) return nullptr;
  return result->pairs[index].second.c_str();
}

DDPSPAWN_EXPORT int32_t ddpspawn_run_failed_rank(void) { return t_last_run.failed_rank; }

DDPSPAWN_EXPORT int32_t ddpspawn_run_nprocs(void) {
  return static_cast<int32_t>(t_last_run.outcomes.size());
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_run_rank_report(int32_t rank,
                                                         ddpspawn_rank_report* out_report) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckLastRunRank(rank));
    return ddpspawn::capi::FillRankReport(t_last_run.outcomes[rank], out_report);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_run_rank_error(int32_t rank, const char** out_text) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckLastRunRank(rank));
    RETURN_IF_ERROR(NotNull(out_text, "out_text"));
    *out_text = t_last_run.outcomes[rank].error_text.c_str();
    return absl::OkStatus();
  });
}

}  // extern "C"
