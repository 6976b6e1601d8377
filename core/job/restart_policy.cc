// Restarting a job's ranks (see restart_policy.h).
#include "core/job/restart_policy.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

absl::string_view FirstLine(absl::string_view text) { return text.substr(0, text.find('\n')); }

// Plain values.
struct RestartDecision {
  bool restart = false;
  // When not restarting: why, for RestartSteps::decline.
  std::string declined_because;
};

// After an attempt ended with `ended` (not Ok), having restarted `restarts` times of
// `max_restarts`.
RestartDecision DecideRestart(const absl::Status& ended, int restarts, int max_restarts) {
  RestartDecision decision;
  if (!absl::IsAborted(ended)) {
    decision.declined_because =
        absl::StrCat("its job ended in a way a restart does not retry (",
                     absl::StatusCodeToString(ended.code()), ": ", FirstLine(ended.message()), ")");
  } else if (restarts >= max_restarts) {
    decision.declined_because =
        absl::StrCat("it has no restart left (max_restarts=", max_restarts, ")");
  } else {
    decision.restart = true;
  }
  return decision;
}

// `ended`, its message followed by "(after N restarts)" when there were any.
absl::Status AfterRestarts(const absl::Status& ended, int restarts) {
  if (restarts == 0) return ended;
  return absl::Status(ended.code(), absl::StrCat(ended.message(), "\n(after ", restarts,
                                                 restarts == 1 ? " restart" : " restarts", ")"));
}

void AnnounceRestart(int restart, int max_restarts, const absl::Status& ended,
                     absl::string_view continuing_from) {
  const std::string why(FirstLine(ended.message()));
  std::fprintf(stderr, "ddpspawn: restart %d of %d: %s\n", restart, max_restarts, why.c_str());
  if (!continuing_from.empty()) {
    std::fprintf(stderr, "ddpspawn: continuing from %.*s\n",
                 static_cast<int>(continuing_from.size()), continuing_from.data());
  }
}

}  // namespace

absl::Status RunWithRestarts(const RestartSteps& steps, int max_restarts, int& restarts) {
  for (;;) {
    absl::Status ended = steps.run_attempt();
    if (ended.ok()) return ended;
    const RestartDecision decision = DecideRestart(ended, restarts, max_restarts);
    if (!decision.restart) {
      // With no restarts allowed, no node waits for an answer.
      if (max_restarts > 0) steps.decline(decision.declined_because);
      return AfterRestarts(ended, restarts);
    }
    absl::StatusOr<std::string> resume_point = steps.agree_resume_point();
    if (!resume_point.ok()) {
      const absl::Status after = AfterRestarts(ended, restarts);
      return absl::Status(
          ended.code(),
          absl::StrCat(after.message(), "\nnot restarted: ", resume_point.status().message()));
    }
    ++restarts;
    std::string continuing_from =
        resume_point->empty() ? steps.empty_resume_point_reads_as : *resume_point;
    if (steps.describe_resume_point) {
      const std::string where = steps.describe_resume_point(*resume_point);
      if (!where.empty()) absl::StrAppend(&continuing_from, " (", where, ")");
    }
    AnnounceRestart(restarts, max_restarts, ended, continuing_from);
    RETURN_IF_ERROR(steps.prepare_next(*resume_point));
  }
}

}  // namespace ddpspawn
