// InMemoryCommit: Horovod elastic's commit, for a fit that must survive losing a rank. Fit copies
// its whole state (weights, optimizer, counters, every rank's RNG, each callback's state: what a
// checkpoint holds, as copied tensors: StateSnapshot) into it after every every_n_steps optimizer
// steps, on every rank; nothing is serialized and nothing goes to disk. After the job lost a rank
// (or takes one in), the next fit resumes from new rank 0's commit (set `step` and `resume`)
// instead of a checkpoint file: each rank that holds that commit restores its own copy, and rank 0
// serializes and broadcasts it only when some rank (a replacement) lacks it.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_IN_MEMORY_COMMIT_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_IN_MEMORY_COMMIT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/model/module.h"
#include "core/model/state_snapshot.h"

namespace ddpspawn {

// Plain values; thread-compatible (the training thread writes it, the elastic loop reads it between
// fits).
struct InMemoryCommit {
  int64_t every_n_steps = 20;             // >= 1
  std::optional<StateSnapshot> snapshot;  // this rank's last commit; none before the first
  // The step of the commit to resume from: the snapshot's, or new rank 0's once the group changed
  // (-1: none yet).
  int64_t step = -1;
  int64_t reached_step = 0;  // the last optimizer step this rank finished
  // The next fit restores the commit of `step` (every rank alike) instead of resume_from.
  bool resume = false;
  // Called on every rank after each commit within fit (all ranks alike, so it may run a
  // collective): a non-OK status ends the fit with it, leaving the commit to resume from (an
  // elastic fit ends it so to take a replacement rank in). Unset: nothing.
  std::function<absl::Status()> after_commit;
};

// Below min_ranks (the job ends), in the survivor the launcher names: writes `commit` to `path` as
// a checkpoint (restored into `module` and an optimizer made as fit makes it from
// module.ConfigureOptimizers()), for --resume-from. Returns the line the job's error gives: where
// rank `rank` (as launched) wrote it, or why it did not.
std::string SaveLastCommit(const InMemoryCommit& commit, LightningModule& module,
                           const std::string& path, int rank);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_IN_MEMORY_COMMIT_H_
