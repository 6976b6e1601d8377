// The launcher's notes on the ranks the others wait for (see waited_for.h).
#include "core/launch/waited_for.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/env/run_dir.h"
#include "core/trace/flight_recorder.h"
#include "core/util/process_state.h"

namespace ddpspawn {
namespace {

// How long a rank must have waited in a collective that another rank never reached for the launcher
// to name that rank when the job fails: far longer than ranks' ordinary skew.
constexpr absl::Duration kWaitedForAnother = absl::Milliseconds(500);

}  // namespace

std::vector<bool> NoteRanksWaitedFor(const std::string& run_dir, std::vector<RankOutcome>& outcomes,
                                     int first_global_rank, absl::Time now,
                                     absl::string_view when) {
  std::vector<bool> in_own_code(outcomes.size());
  int newest = -1;
  for (int g = 0; access(RunDirCallsFile(run_dir, 0, g).c_str(), F_OK) == 0; ++g) newest = g;
  std::vector<absl::StatusOr<RecordedRank>> ranks;
  if (newest >= 0) ranks = ReadFlightRecorders(run_dir, static_cast<int>(outcomes.size()), newest);
  uint64_t furthest = 0;
  for (const auto& rank : ranks) {
    if (rank.ok()) furthest = std::max(furthest, rank->started);
  }
  absl::Time entered = absl::InfiniteFuture();  // when the first rank started call #furthest
  std::string what;
  for (const auto& rank : ranks) {
    if (rank.ok() && rank->started == furthest && rank->last_start < entered) {
      entered = rank->last_start;
      what = rank->last_what;
    }
  }
  const bool others_waited = furthest > 0 && now - entered >= kWaitedForAnother;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    RankOutcome& outcome = outcomes[r];
    if (outcome.state != RankState::kRunning || !outcome.error_text.empty()) continue;
    const bool stopped = ReadProcessState(outcome.pid) == ProcessState::kStopped;
    // The records are by the ranks' numbers in that group (an elastic job renumbers them): found by
    // pid.
    const RecordedRank* record = nullptr;
    for (const auto& rank : ranks) {
      if (rank.ok() && rank->pid == outcome.pid) record = &*rank;
    }
    const bool behind = others_waited && record != nullptr && record->started < furthest;
    if (!stopped && !behind) continue;
    in_own_code[r] = behind && !stopped && record->last_ended;
    outcome.error_text =
        absl::StrCat("rank ", first_global_rank + static_cast<int>(r), " (pid ", outcome.pid, ") ");
    if (behind) {
      absl::StrAppend(&outcome.error_text, "never reached call #", furthest, " (", what,
                      "), which another rank had waited in for ",
                      absl::FormatDuration(absl::Trunc(now - entered, absl::Milliseconds(10))), " ",
                      when,
                      stopped          ? "; its process was stopped (SIGSTOP or a debugger)"
                      : in_own_code[r] ? "; it was running outside any collective"
                                       : "");
      continue;
    }
    absl::StrAppend(&outcome.error_text, "was stopped (SIGSTOP or a debugger) ", when);
    if (record != nullptr && !record->last_ended) {
      absl::StrAppend(&outcome.error_text, ", inside call #", record->started, " (",
                      record->last_what, "), which the others waited in");
    }
  }
  return in_own_code;
}

}  // namespace ddpspawn
