// A launcher demo (bazel run //tools:demo; tools/demo, the main job, runs the ddpspawn CLI
// instead): launches 2 ranks of this program (spawn start method), which join a Gloo process group,
// estimate pi together by Monte Carlo with every collective, and hand a summary back to the
// launcher. `demo --fail` shows what a failing rank looks like instead.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/comm/process_group.h"
#include "core/env/cluster_environment.h"
#include "core/launch/launcher.h"
#include "core/launch/worker_channel.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

absl::Status Worker(bool fail) {
  ASSIGN_OR_RETURN(ClusterInfo cluster, DetectClusterEnvironment());
  ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> joined, ProcessGroup::Create(cluster));
  ProcessGroup& group = *joined;
  const int rank = group.rank(), world = group.world_size();

  // Rank 0 decides the sample count and broadcasts it.
  int64_t samples = rank == 0 ? 4'000'000 : 0;
  RETURN_IF_ERROR(group.Broadcast(&samples, 1, DType::kInt64, 0));
  if (fail && rank == 1) {
    return absl::InternalError("rank 1 fails on purpose (demo --fail)");
  }

  absl::Time start = absl::Now();
  at::manual_seed(1234 + rank);
  at::Tensor points = at::rand({samples, 2}, at::kDouble);
  int64_t hits = (points.pow(2).sum(1) <= 1.0).sum().item<int64_t>();
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("[rank %d] %lld of %lld samples inside the circle (%.3f s)\n", rank,
              static_cast<long long>(hits), static_cast<long long>(samples), seconds);

  int64_t totals[2] = {hits, samples};
  RETURN_IF_ERROR(group.AllReduce(totals, 2, DType::kInt64, ReduceOp::kSum));
  double slowest = seconds;
  RETURN_IF_ERROR(group.AllReduce(&slowest, 1, DType::kFloat64, ReduceOp::kMax));
  std::vector<double> per_rank(world);
  RETURN_IF_ERROR(group.AllGather(&seconds, 1, DType::kFloat64, per_rank.data()));
  RETURN_IF_ERROR(group.Barrier("done"));
  if (rank == 0) {
    double pi = 4.0 * static_cast<double>(totals[0]) / static_cast<double>(totals[1]);
    std::string summary = absl::StrFormat(
        "pi ~= %.5f from %d samples on %d ranks (error %.2e); slowest rank %.3f s; per rank:", pi,
        totals[1], world, std::abs(pi - M_PI), slowest);
    for (int r = 0; r < world; ++r) absl::StrAppendFormat(&summary, " %.3f", per_rank[r]);
    return SetWorkerResult(summary);
  }
  return absl::OkStatus();
}

int Launcher(const char* self, bool fail) {
  LaunchSpec spec;
  spec.nprocs = 2;
  spec.argv = {self, "--worker"};
  if (fail) spec.argv.emplace_back("--fail");
  spec.timeout = absl::Minutes(5);
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  absl::Status status = job.ok() ? (*job)->Start() : job.status();
  if (status.ok()) status = (*job)->Wait();
  std::printf("launcher: job took %.2f s\n", absl::ToDoubleSeconds(absl::Now() - start));
  if (job.ok()) {
    for (int r = 0; r < (*job)->nprocs(); ++r) {
      const RankOutcome& o = (*job)->outcomes()[r];
      std::string how = o.state == RankState::kSignaled
                            ? absl::StrCat("killed by ", SignalName(o.signal))
                            : absl::StrCat("exited with code ", o.exit_code);
      if (o.stopped_by_launcher) how += " (stopped by the launcher)";
      std::printf("launcher: rank %d (pid %d) %s\n", r, o.pid, how.c_str());
    }
  }
  if (!status.ok()) {
    std::printf("launcher: the job failed: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::printf("launcher: rank 0 handed back: %s\n", (*job)->result().value_or("").c_str());
  return 0;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  bool worker = false, fail = false;
  for (int i = 1; i < argc; ++i) {
    worker |= std::strcmp(argv[i], "--worker") == 0;
    fail |= std::strcmp(argv[i], "--fail") == 0;
  }
  if (!worker) return ddpspawn::Launcher(argv[0], fail);
  absl::Status status = ddpspawn::Worker(fail);
  if (!status.ok()) {
    (void)ddpspawn::SetWorkerError(status.message());
    return 1;
  }
  return 0;
}
