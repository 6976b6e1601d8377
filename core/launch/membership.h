// Elastic membership: which of a job's ranks go on after the job lost some, as the launcher tells
// its workers. Each time the launcher drops ranks it rewrites one file of its private run directory
// (run_dir.h: a temporary file, then a rename, so a reader never sees half of it) with the change's
// number and the ranks that go on; a worker whose collective failed waits for a change newer than
// the one it trains under, and joins its survivors' group at the place the change gives it. Plain
// functions and values; each call is independent.
#ifndef DDPSPAWN_CORE_LAUNCH_MEMBERSHIP_H_
#define DDPSPAWN_CORE_LAUNCH_MEMBERSHIP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpspawn {

struct MembershipChange {
  int number = 0;          // 1 for the job's first change, then 2, ...
  std::vector<int> ranks;  // the ranks (as launched) that go on, in the order of their new ranks
  std::vector<int> left;   // the ranks (as launched) that this change dropped
  std::string why;         // how each dropped rank ended, one line each
};

// In the launcher: makes `change` the job's latest.
absl::Status PublishMembershipChange(const std::string& run_dir, const MembershipChange& change);

// The job's latest change; nullopt when there was none. An unreadable or malformed file is an
// error.
absl::StatusOr<std::optional<MembershipChange>> ReadMembershipChange(const std::string& run_dir);

// In a worker whose collective failed (`rank` as launched): asks the launcher to look for a rank
// the others wait for (a hung one, see LaunchSpec::min_ranks), which it then drops.
absl::Status RequestRecovery(const std::string& run_dir, int rank);

// In the launcher: whether any of `ranks` (as launched) asked since the last call.
bool TakeRecoveryRequests(const std::string& run_dir, const std::vector<int>& ranks);

// In a worker: waits up to `patience` for a change numbered above `after` and returns it; nullopt
// when none came (or the file cannot be read: the launcher is gone).
std::optional<MembershipChange> AwaitMembershipChange(const std::string& run_dir, int after,
                                                      absl::Duration patience);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_MEMBERSHIP_H_
