// The layout of a launcher's run directory (a private 0700 directory made with mkdtemp, named to
// the ranks by DDPSPAWN_RUN_DIR): every name in it, and the prefix of the job's /dev/shm segments.
// The launcher, the worker channel, the process groups and the flight recorder all take their names
// from here. Pure functions; thread-safe.
#ifndef DDPSPAWN_CORE_ENV_RUN_DIR_H_
#define DDPSPAWN_CORE_ENV_RUN_DIR_H_

#include <string>

namespace ddpspawn {

// The mkdtemp pattern of a run directory under `tmp_dir`.
std::string RunDirPattern(const std::string& tmp_dir);

// The file store of the process group a rank joins `generation`-th.
std::string RunDirStoreFile(const std::string& run_dir, int generation);

// Beside a store file: the launcher's word that the group forming on it lost a member (an elastic
// job's next change is coming), so that its ranks stop waiting for that member.
std::string AbandonedStoreMarker(const std::string& store_file);

// Rank 0's result for the launcher.
std::string RunDirResultFile(const std::string& run_dir);

// How far a rank got (its global step, binary int64), as it last said.
std::string RunDirProgressFile(const std::string& run_dir, int rank);

// A rank's report of why it failed.
std::string RunDirErrorFile(const std::string& run_dir, int rank);

// The ranks that reported a failure, one line each, in the order they did.
std::string RunDirFailureOrderFile(const std::string& run_dir);

// Which ranks go on after an elastic job lost some (core/launch/membership.h).
std::string RunDirMembershipFile(const std::string& run_dir);

// An elastic job that lost more ranks than min_ranks allows: a survivor's word of where it wrote
// the last commit (or why it could not).
std::string RunDirLastCommitFile(const std::string& run_dir);

// A rank's request that the launcher of an elastic job look for a hung rank to drop.
std::string RunDirRecoveryRequestFile(const std::string& run_dir, int rank);

// An elastic job's rank: the number of the membership change whose group it last formed.
std::string RunDirFormedFile(const std::string& run_dir, int rank);

// A replacement rank of an elastic job (max_restarts with min_ranks): its word that it is ready to
// join the running ranks, then that it has joined them.
std::string RunDirJoinRequestFile(const std::string& run_dir, int rank);
std::string RunDirJoinedFile(const std::string& run_dir, int rank);

// A rank's flight recorder of its `generation`-th group's collectives.
std::string RunDirCallsFile(const std::string& run_dir, int rank, int generation);

// The process groups of the job's workers, for the guardian to kill should the launcher die (binary
// pid_t values).
std::string RunDirProcessGroupsFile(const std::string& run_dir);

// The start of the names of the job's /dev/shm segments (which add a generation and random
// characters); the launcher's clean-up removes what starts with it.
std::string SharedMemoryPrefix(const std::string& run_dir);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_ENV_RUN_DIR_H_
