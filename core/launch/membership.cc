// The membership file between an elastic job's launcher and its workers (see membership.h): lines
// "number=N", "ranks=R,R,...", "left=R,...", "joined=R,...", "latest_loss=N", then "why=..." lines.
#include "core/launch/membership.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "core/env/run_dir.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(1);

absl::StatusOr<std::vector<int>> ParseRanks(absl::string_view text) {
  std::vector<int> ranks;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int rank = 0;
    if (!absl::SimpleAtoi(item, &rank) || rank < 0) {
      return absl::DataLossError(absl::StrCat("the membership file names rank '", item, "'"));
    }
    ranks.push_back(rank);
  }
  return ranks;
}

}  // namespace

std::string EncodeMembershipChange(const MembershipChange& change) {
  std::string text = absl::StrCat(
      "number=", change.number, "\nranks=", absl::StrJoin(change.ranks, ","),
      "\nleft=", absl::StrJoin(change.left, ","), "\njoined=", absl::StrJoin(change.joined, ","),
      "\nlatest_loss=", change.latest_loss, "\n", change.ends_job ? "ends_job=1\n" : "");
  for (absl::string_view line : absl::StrSplit(change.why, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&text, "why=", line, "\n");
  }
  return text;
}

absl::StatusOr<MembershipChange> DecodeMembershipChange(absl::string_view text) {
  MembershipChange change;
  bool numbered = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> field =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (field.first == "number") {
      numbered = absl::SimpleAtoi(field.second, &change.number) && change.number > 0;
    } else if (field.first == "ranks") {
      ASSIGN_OR_RETURN(change.ranks, ParseRanks(field.second));
    } else if (field.first == "left") {
      ASSIGN_OR_RETURN(change.left, ParseRanks(field.second));
    } else if (field.first == "joined") {
      ASSIGN_OR_RETURN(change.joined, ParseRanks(field.second));
    } else if (field.first == "latest_loss") {
      if (!absl::SimpleAtoi(field.second, &change.latest_loss) || change.latest_loss < 0) {
        return absl::DataLossError(
            absl::StrCat("the membership file says latest_loss=", field.second));
      }
    } else if (field.first == "ends_job") {
      change.ends_job = field.second == "1";
    } else if (field.first == "why") {
      absl::StrAppend(&change.why, field.second, "\n");
    }
  }
  if (!numbered || change.ranks.empty()) {
    return absl::DataLossError("the text is not a membership change");
  }
  return change;
}

absl::Status PublishMembershipChange(const std::string& run_dir, const MembershipChange& change) {
  return WriteFileAtomically(RunDirMembershipFile(run_dir), EncodeMembershipChange(change),
                             /*durable=*/false);
}

absl::StatusOr<std::optional<MembershipChange>> ReadMembershipChange(const std::string& run_dir) {
  const std::string path = RunDirMembershipFile(run_dir);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::optional<MembershipChange>();
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  absl::StatusOr<MembershipChange> change = DecodeMembershipChange(text);
  if (!change.ok()) return absl::DataLossError(absl::StrCat(path, " is not a membership change"));
  return std::optional<MembershipChange>(*std::move(change));
}

absl::Status ReportLastCommit(const std::string& run_dir, const std::string& line) {
  return WriteFileAtomically(RunDirLastCommitFile(run_dir), line, /*durable=*/false);
}

std::optional<std::string> ReadLastCommitReport(const std::string& run_dir) {
  absl::StatusOr<std::string> line = ReadWholeFile(RunDirLastCommitFile(run_dir));
  if (!line.ok()) return std::nullopt;
  return *std::move(line);
}

absl::Status ConfirmFormed(const std::string& run_dir, int rank, int number) {
  return WriteFileAtomically(RunDirFormedFile(run_dir, rank), absl::StrCat(number),
                             /*durable=*/false);
}

int FormedChange(const std::string& run_dir, int rank) {
  absl::StatusOr<std::string> text = ReadWholeFile(RunDirFormedFile(run_dir, rank));
  int number = 0;
  if (!text.ok() || !absl::SimpleAtoi(*text, &number)) return 0;
  return number;
}

absl::Status RequestRecovery(const std::string& run_dir, int rank) {
  return WriteFileAtomically(RunDirRecoveryRequestFile(run_dir, rank), "", /*durable=*/false);
}

bool TakeRecoveryRequests(const std::string& run_dir, const std::vector<int>& ranks) {
  bool asked = false;
  for (int rank : ranks) {
    std::error_code error;
    asked = std::filesystem::remove(RunDirRecoveryRequestFile(run_dir, rank), error) || asked;
  }
  return asked;
}

std::optional<MembershipChange> AwaitMembershipChange(const std::string& run_dir, int after,
                                                      absl::Duration patience,
                                                      AwaitedChange awaited) {
  const absl::Time give_up = absl::Now() + patience;
  while (true) {
    absl::StatusOr<std::optional<MembershipChange>> change = ReadMembershipChange(run_dir);
    if (!change.ok()) return std::nullopt;
    if (change->has_value() && (*change)->number > after &&
        (awaited == AwaitedChange::kAny || (*change)->latest_loss > after)) {
      return *std::move(*change);
    }
    if (absl::Now() >= give_up) return std::nullopt;
    absl::SleepFor(kPollInterval);
  }
}

absl::Status RequestToJoin(const std::string& run_dir, int rank) {
  return WriteFileAtomically(RunDirJoinRequestFile(run_dir, rank), "", /*durable=*/false);
}

absl::Status ConfirmJoined(const std::string& run_dir, int rank) {
  return WriteFileAtomically(RunDirJoinedFile(run_dir, rank), "", /*durable=*/false);
}

bool TakeJoinRequest(const std::string& run_dir, int rank) {
  std::error_code error;
  return std::filesystem::remove(RunDirJoinRequestFile(run_dir, rank), error);
}

bool TakeJoined(const std::string& run_dir, int rank) {
  std::error_code error;
  return std::filesystem::remove(RunDirJoinedFile(run_dir, rank), error);
}

}  // namespace ddpspawn
