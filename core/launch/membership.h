// Elastic membership: which of a job's ranks go on after the job lost some or a replacement is
// ready, as the launcher tells its workers. Each time the launcher drops ranks, or admits a
// replacement, it rewrites one file of its private run directory (run_dir.h: a temporary file, then
// a rename, so a reader never sees half of it) with the change's number and the ranks that go on; a
// worker whose collective failed waits for a change that dropped a rank, newer than the one it
// trains under, and joins its survivors' group at the place the change gives it; the running ranks
// take a change that admits a replacement at their next commit. Plain functions and values; each
// call is independent.
#ifndef DDPSPAWN_CORE_LAUNCH_MEMBERSHIP_H_
#define DDPSPAWN_CORE_LAUNCH_MEMBERSHIP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddpspawn {

struct MembershipChange {
  int number = 0;           // 1 for the job's first change, then 2, ...
  std::vector<int> ranks;   // the ranks (as launched) that go on, in the order of their new ranks
  std::vector<int> left;    // the ranks (as launched) that this change dropped
  std::vector<int> joined;  // the replacements (as launched) that this change admits, last in ranks
  std::string why;          // how each dropped rank ended, one line each
  // The number of the job's newest change that dropped a rank (this one's, when it did): a rank
  // whose collective failed waits for one above the change it trains under.
  int latest_loss = 0;
  // Fewer than min_ranks go on: the job ends. The first of `ranks` writes the last commit to disk
  // (ReportLastCommit), and every one of them ends.
  bool ends_job = false;
};

// The change as the membership file holds it, and back (a malformed text is DataLoss).
std::string EncodeMembershipChange(const MembershipChange& change);
absl::StatusOr<MembershipChange> DecodeMembershipChange(absl::string_view text);

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

// Which changes a worker waits for: any, or one after a loss (a worker whose collective failed: the
// latest change, once some change above `after` dropped a rank).
enum class AwaitedChange { kAny, kAfterALoss };

// In a worker: waits up to `patience` for a change numbered above `after` (of the kind `awaited`)
// and returns it; nullopt when none came (or the file cannot be read: the launcher is gone).
std::optional<MembershipChange> AwaitMembershipChange(const std::string& run_dir, int after,
                                                      absl::Duration patience,
                                                      AwaitedChange awaited = AwaitedChange::kAny);

// In the survivor that writes the last commit of a job that ends (MembershipChange::ends_job): one
// line for the launcher's error, where it wrote it or why it could not. In the launcher: that line,
// once written.
absl::Status ReportLastCommit(const std::string& run_dir, const std::string& line);
std::optional<std::string> ReadLastCommitReport(const std::string& run_dir);

// In a rank (`rank` as launched) that formed the group of change `number` with the others: says so.
// In the launcher: the number of the change whose group `rank` last said it formed (0: none). The
// launcher admits a replacement only once every member formed the latest change's group, so that no
// rank is still forming an older one when the admission comes.
absl::Status ConfirmFormed(const std::string& run_dir, int rank, int number);
int FormedChange(const std::string& run_dir, int rank);

// In a replacement rank (`rank` as launched), ready to train: asks the launcher to admit it; once
// in the running ranks' group, says so (the launcher stops a replacement still waiting when the
// others have finished).
absl::Status RequestToJoin(const std::string& run_dir, int rank);
absl::Status ConfirmJoined(const std::string& run_dir, int rank);

// In the launcher: whether `rank` (as launched) asked to join, or said it joined, since the last
// call.
bool TakeJoinRequest(const std::string& run_dir, int rank);
bool TakeJoined(const std::string& run_dir, int rank);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_MEMBERSHIP_H_
