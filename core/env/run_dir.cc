// Names in a launcher's run directory (see run_dir.h).
#include "core/env/run_dir.h"

#include "absl/strings/str_cat.h"

namespace ddpspawn {

std::string RunDirPattern(const std::string& tmp_dir) {
  return absl::StrCat(tmp_dir, "/ddpspawn-XXXXXX");
}

std::string RunDirStoreFile(const std::string& run_dir, int generation) {
  return absl::StrCat(run_dir, "/store.", generation);
}

std::string AbandonedStoreMarker(const std::string& store_file) {
  return absl::StrCat(store_file, ".abandoned");
}

std::string RunDirResultFile(const std::string& run_dir) {
  return absl::StrCat(run_dir, "/result");
}

std::string RunDirErrorFile(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank", rank, ".error");
}

std::string RunDirFailureOrderFile(const std::string& run_dir) {
  return absl::StrCat(run_dir, "/failure_order");
}

std::string RunDirMembershipFile(const std::string& run_dir) {
  return absl::StrCat(run_dir, "/membership");
}

std::string RunDirLastCommitFile(const std::string& run_dir) {
  return absl::StrCat(run_dir, "/last_commit");
}

std::string RunDirRecoveryRequestFile(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank", rank, ".recovery");
}

std::string RunDirProgressFile(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank", rank, ".progress");
}

std::string RunDirFormedFile(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank", rank, ".formed");
}

std::string RunDirJoinRequestFile(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank", rank, ".join");
}

std::string RunDirJoinedFile(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank", rank, ".joined");
}

std::string RunDirCallsFile(const std::string& run_dir, int rank, int generation) {
  return absl::StrCat(run_dir, "/rank", rank, ".group", generation, ".calls");
}

std::string RunDirProcessGroupsFile(const std::string& run_dir) {
  return absl::StrCat(run_dir, "/process_groups");
}

std::string SharedMemoryPrefix(const std::string& run_dir) {
  return absl::StrCat(run_dir.substr(run_dir.rfind('/') + 1), "-allreduce-");
}

}  // namespace ddpspawn
