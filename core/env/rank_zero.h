// Output once per job from a program that every rank runs (a spawned rank reruns main(); torchrun
// and srun start the program once per rank), so that a banner or a progress line is not printed by
// every rank, interleaved.
#ifndef DDPSPAWN_CORE_ENV_RANK_ZERO_H_
#define DDPSPAWN_CORE_ENV_RANK_ZERO_H_

#include "absl/strings/string_view.h"
#include "core/env/cluster_environment.h"

namespace ddpspawn {

// Lightning's rank_zero_only: true in global rank 0, and in a process that is no rank (a launching
// process, a single process). Where the environment names a rank that cannot be read, true: output
// is never hidden by a guess.
bool IsRankZero(const EnvLookup& env = ProcessEnv);

// For what main() prints before the ranks start (a banner): true in a ddpspawn launching process
// and never in the ranks it spawns (which rerun main()); in a job that torchrun or srun started,
// true in rank 0 only.
bool IsFirstProcessOfJob(const EnvLookup& env = ProcessEnv);

// Writes `text` to stdout and flushes it where IsRankZero(); else nothing.
void RankZeroPrint(absl::string_view text);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_ENV_RANK_ZERO_H_
