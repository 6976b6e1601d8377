// Restarting a job's ranks (see restart_policy.h).
#include "core/job/restart_policy.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace ddpspawn {
namespace {

absl::string_view FirstLine(absl::string_view text) { return text.substr(0, text.find('\n')); }

}  // namespace

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

}  // namespace ddpspawn
