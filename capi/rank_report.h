// Fills the C ABI's ddpspawn_rank_report from a launcher's RankOutcome, for jobs
// (ddpspawn_job_rank_report) and training runs (ddpspawn_run_rank_report).
#ifndef DDPSPAWN_CAPI_RANK_REPORT_H_
#define DDPSPAWN_CAPI_RANK_REPORT_H_

#include <cstring>

#include "absl/status/status.h"
#include "capi/status.h"
#include "core/launch/launcher.h"
#include "ddpspawn/ddpspawn.h"

namespace ddpspawn::capi {

// Writes `outcome` into the caller's report, as many bytes as its struct_size says (a released
// size).
inline absl::Status FillRankReport(const RankOutcome& outcome, ddpspawn_rank_report* out_report) {
  if (absl::Status s = NotNull(out_report, "out_report"); !s.ok()) return s;
  ddpspawn_rank_report report = DDPSPAWN_RANK_REPORT_INIT;
  if (absl::Status s = ReadOptions(out_report, "DDPSPAWN_RANK_REPORT", &report); !s.ok()) {
    return s;
  }
  report.state = static_cast<int32_t>(outcome.state);
  report.exit_code = outcome.exit_code;
  report.signal = outcome.signal;
  report.pid = outcome.pid;
  report.stopped_by_launcher = outcome.stopped_by_launcher ? 1 : 0;
  const uint32_t caller_size = out_report->struct_size;
  std::memcpy(static_cast<void*>(out_report), &report, caller_size);
  out_report->struct_size = caller_size;
  return absl::OkStatus();
}

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_RANK_REPORT_H_
