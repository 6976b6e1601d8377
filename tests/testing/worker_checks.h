// What the test workers do when a check fails: the launcher gets the reason as the rank's error
// (SetWorkerError), stderr gets it with the program's name, and the rank exits 1; and how they join
// their Gloo group. Header-only; for test workers.
#ifndef DDPSPAWN_TESTS_TESTING_WORKER_CHECKS_H_
#define DDPSPAWN_TESTS_TESTING_WORKER_CHECKS_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/comm/process_group.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"

namespace ddpspawn::test_worker {

// The program's name in stderr lines; each worker defines it.
extern const char kWorkerName[];

[[noreturn]] inline void Fail(const std::string& why) {
  (void)SetWorkerError(why);
  std::fprintf(stderr, "%s: %s\n", kWorkerName, why.c_str());
  std::exit(1);
}

inline void CheckOk(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Fail(absl::StrCat(what, ": ", status.ToString()));
}

// This rank's Gloo group with the launcher's other ranks (60 s timeout); a failure ends the rank.
inline std::unique_ptr<ProcessGroup> JoinGlooGroup() {
  absl::StatusOr<ClusterInfo> cluster = DetectClusterEnvironment();
  CheckOk(cluster.status(), "cluster");
  absl::StatusOr<std::unique_ptr<ProcessGroup>> joined =
      ProcessGroup::Create(*cluster, {Backend::kGloo, absl::Seconds(60)});
  CheckOk(joined.status(), "join");
  return *std::move(joined);
}

}  // namespace ddpspawn::test_worker

#endif  // DDPSPAWN_TESTS_TESTING_WORKER_CHECKS_H_
