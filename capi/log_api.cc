// ddpspawn_log_metrics: the Trainer's metrics.csv rows for a loop of one's own (the core's
// AppendMetricRows), written by rank 0.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/context.h"
#include "capi/status.h"
#include "core/train/loggers/csv_logger.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn.h"

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;

extern "C" {

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_log_metrics(ddpspawn_context* context, const char* dir,
                                                     int64_t epoch, int64_t step,
                                                     const char* const* names, const double* values,
                                                     size_t count) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    RETURN_IF_ERROR(NotNull(dir, "dir"));
    if (count > 0) {
      RETURN_IF_ERROR(NotNull(names, "names"));
      RETURN_IF_ERROR(NotNull(values, "values"));
    }
    std::vector<std::pair<std::string, double>> rows;
    for (size_t i = 0; i < count; ++i) {
      const std::string what = absl::StrCat("names[", i, "]");
      RETURN_IF_ERROR(NotNull(names[i], what.c_str()));
      rows.emplace_back(names[i], values[i]);
    }
    RETURN_IF_ERROR(ddpspawn::CheckMetricNames(rows));  // on every rank, to fail alike
    if (context->group->rank() != 0) return absl::OkStatus();
    return ddpspawn::AppendMetricRows(dir, epoch, step, rows);
  });
}

}  // extern "C"
