// Fit's profilers (see fit_profiler.h).
#include "core/train/loggers/fit_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/comm/process_group.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/util/enum_names.h"
#include "core/util/exception_status.h"
#include "core/util/files.h"
#include "core/util/output_dir.h"
#include "core/util/status_macros.h"
#include "core/util/temp_files.h"

namespace ddpspawn {
namespace {

constexpr NamedValue<ProfilerKind> kProfilerNames[] = {
    {"none", ProfilerKind::kNone},
    {"simple", ProfilerKind::kSimple},
    {"pytorch", ProfilerKind::kPyTorch},
};

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

}  // namespace

absl::string_view ProfilerKindName(ProfilerKind kind) { return NameOf(kProfilerNames, kind); }

absl::StatusOr<ProfilerKind> ParseProfilerKind(absl::string_view name) {
  return ParseName(kProfilerNames, "profiler", name);
}

FitProfiler::~FitProfiler() {
  if (recording_) profiler::disableProfiler();
}

absl::Status FitProfiler::Start() {
  started_ = absl::Now();
  if (kind_ != ProfilerKind::kPyTorch) return absl::OkStatus();
  return StatusOnException("LibTorch's profiler would not start", [&] {
    const ProfilerConfig config(ProfilerState::KINETO);
    const std::set<ActivityType> activities = {ActivityType::CPU};
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
    recording_ = true;
  });
}

void FitProfiler::Add(absl::string_view action, absl::Duration took) {
  Totals& totals = actions_[std::string(action)];
  ++totals.calls;
  totals.total += took;
}

std::string FitProfiler::Table(double blocked_seconds) const {
  const double fit_seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  std::vector<std::pair<std::string, Totals>> rows(actions_.begin(), actions_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  std::string table = absl::StrFormat("%-28s %14s %10s %14s %9s\n", "Action", "Mean (ms)", "Calls",
                                      "Total (s)", "Percent");
  auto row = [&](const std::string& name, const std::string& mean, const std::string& calls,
                 double seconds) {
    absl::StrAppendFormat(&table, "%-28s %14s %10s %14.4f %8.2f%%\n", name, mean, calls, seconds,
                          fit_seconds > 0 ? 100 * seconds / fit_seconds : 0.0);
  };
  row("fit", "", "1", fit_seconds);
  for (const auto& [name, totals] : rows) {
    const double seconds = absl::ToDoubleSeconds(totals.total);
    row(name, absl::StrFormat("%.4f", 1e3 * seconds / static_cast<double>(totals.calls)),
        absl::StrCat(totals.calls), seconds);
  }
  row("collectives (time blocked)", "", "", blocked_seconds);
  return table;
}

absl::Status FitProfiler::Finish(DDPSpawnStrategy& strategy, const std::string& dir,
                                 double blocked_seconds, bool print) {
  const int rank = strategy.global_rank();
  if (kind_ == ProfilerKind::kPyTorch) {
    std::unique_ptr<profiler::ProfilerResult> result;
    RETURN_IF_ERROR(StatusOnException("LibTorch's profiler would not stop", [&] {
      recording_ = false;
      result = profiler::disableProfiler();
    }));
    // Every rank writes its own trace (on its own node's file system).
    const std::string traces = dir + "/profiler";
    RETURN_IF_ERROR(PrepareOutputDirectory(traces));
    const std::string path = absl::StrCat(traces, "/rank", rank, ".pt.trace.json");
    // LibTorch writes to a path: a named temporary file, created exclusively, renamed over the
    // trace once written.
    ASSIGN_OR_RETURN(TempFile temp, CreateNamedTempFileFor(path));
    absl::Status saved =
        StatusOnException("cannot write the profiler's trace", [&] { result->save(temp.path); });
    if (saved.ok()) saved = CommitTempFile(temp, path);
    DiscardTempFile(temp);
    return saved;
  }
  if (kind_ != ProfilerKind::kSimple) return absl::OkStatus();
  const std::string mine = Table(blocked_seconds);
  std::vector<std::string> tables = {mine};
  if (strategy.group() != nullptr && strategy.world_size() > 1) {
    ASSIGN_OR_RETURN(tables, strategy.group()->AllGatherBytes(mine));
  }
  if (rank != 0) return absl::OkStatus();
  std::string text;
  for (size_t r = 0; r < tables.size(); ++r) {
    absl::StrAppend(&text, "rank ", r, ":\n", tables[r], "\n");
  }
  if (print) std::printf("fit's profile (simple), rank 0:\n%s", mine.c_str());
  return WriteFileAtomically(dir + "/profile.txt", text, /*durable=*/false, 0644);
}

}  // namespace ddpspawn
