// The channel between workers and their launcher: files in the launcher's private run directory.
// Rank 0 leaves a result (bytes); any rank can leave the text of its failure. Both are written
// atomically (temporary file, then rename), so the launcher never reads half a file. A failing rank
// also appends its rank to one shared file (O_APPEND, one short write), which orders the reports: a
// rank failing because a peer did reports after that peer.
#ifndef DDPSPAWN_CORE_LAUNCH_WORKER_CHANNEL_H_
#define DDPSPAWN_CORE_LAUNCH_WORKER_CHANNEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// In a worker: rank 0 hands `bytes` back to the launcher. Unavailable outside a ddpspawn worker;
// FailedPrecondition on another rank.
absl::Status SetWorkerResult(absl::string_view bytes);

// In a worker of an elastic job that lost ranks: this process's rank in the survivors' group, which
// SetWorkerResult() takes instead of RANK (its error reports stay filed under the rank it was
// launched as, which the launcher knows it by).
void SetWorkerGroupRank(int rank);

// In a worker: records why this rank is failing, and that it reported after the ranks that already
// had.
absl::Status SetWorkerError(absl::string_view text);

// In a worker: records how far it got (fit: its global step after each optimizer step), which the
// launcher reads when the job ends (RankOutcome::progress): a restart then says how many steps it
// re-runs. One short write to a file of the run directory, opened on the first call; a no-op
// outside a ddpspawn worker. Call it from one thread.
void SetWorkerProgress(int64_t count);

// In a worker: makes an uncaught C++ exception record its message (SetWorkerError) before the
// process aborts. Idempotent.
void InstallTerminateHandler();

// In the launcher: what the workers left in `run_dir`.
std::optional<std::string> ReadWorkerResult(const std::string& run_dir);
std::optional<std::string> ReadWorkerError(const std::string& run_dir, int rank);
std::optional<int64_t> ReadWorkerProgress(const std::string& run_dir, int rank);
// The global ranks that reported a failure, each once, first reporter first.
std::vector<int> ReadFailureReportOrder(const std::string& run_dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_WORKER_CHANNEL_H_
