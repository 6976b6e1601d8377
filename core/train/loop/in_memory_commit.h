// InMemoryCommit: Horovod elastic's commit, for a fit that must survive losing a rank. Fit copies
// its whole state (weights, optimizer, counters, every rank's RNG, each callback's state: the bytes
// of a checkpoint, SerializeCheckpoint's) into it when it starts and after every every_n_steps
// optimizer steps, on every rank; nothing goes to disk. After the job lost a rank, the survivors'
// next fit resumes from a commit (set `resume`) instead of a checkpoint file.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_IN_MEMORY_COMMIT_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_IN_MEMORY_COMMIT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace ddpspawn {

// Plain values; thread-compatible (the training thread writes it, the elastic loop reads it between
// fits).
struct InMemoryCommit {
  int64_t every_n_steps = 20;  // >= 1
  std::string bytes;           // the last commit; empty before the first
  int64_t step = -1;           // its global step (-1: none yet)
  int64_t reached_step = 0;    // the last optimizer step this rank finished
  // The next fit restores `bytes` (from every rank's same commit) instead of resume_from.
  bool resume = false;
  // Called on every rank after each commit within fit (all ranks alike, so it may run a
  // collective): a non-OK status ends the fit with it, leaving the commit to resume from (an
  // elastic fit ends it so to take a replacement rank in). Unset: nothing.
  std::function<absl::Status()> after_commit;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_IN_MEMORY_COMMIT_H_
