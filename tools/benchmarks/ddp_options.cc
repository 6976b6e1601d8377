// What each DDP option costs: 2 ranks (spawned) train the MLP 784-1024-1024-10 with batch 64 per
// rank on synthetic data, 1 intra-op thread each, under each reducer option and comm hook, and
// report the median step time against the same ranks training without gradient sync (the ceiling)
// and against the default all-reduce; post-local SGD's rows average the parameters after the
// optimizer step, as fit does. Usage: ddp_options [--steps=N]
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/post_local_sgd.h"
#include "core/env/cluster_environment.h"
#include "core/env/settings.h"
#include "core/launch/launcher.h"
#include "core/launch/worker_channel.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

struct Config {
  std::string name;
  std::function<void(DdpOptions&)> apply;
  bool sync = true;
  std::optional<PostLocalSgdOptions> post_local_sgd = std::nullopt;  // its hook and averager
};

std::vector<Config> Configs() {
  auto hook = [](CommHookKind kind) {
    return [kind](DdpOptions& o) { o.reducer.comm_hook = *MakeCommHook(kind, 4, 0); };
  };
  return {
      {"no sync (ceiling)", [](DdpOptions&) {}, false},
      {"default (allreduce, 25 MB buckets)", [](DdpOptions&) {}},
      {"gradient_as_bucket_view=false",
       [](DdpOptions& o) { o.reducer.gradient_as_bucket_view = false; }},
      {"find_unused_parameters", [](DdpOptions& o) { o.reducer.find_unused_parameters = true; }},
      {"find_unused + static_graph",
       [](DdpOptions& o) { o.reducer.find_unused_parameters = o.reducer.static_graph = true; }},
      {"bucket_cap_mb=1", [](DdpOptions& o) { o.reducer.bucket_cap_mb = 1; }},
      {"one bucket (cap 100 MB)",
       [](DdpOptions& o) { o.reducer.bucket_cap_mb = o.reducer.first_bucket_cap_mb = 100; }},
      {"fp16 compression", hook(CommHookKind::kFp16)},
      {"bf16 compression", hook(CommHookKind::kBf16)},
      {"PowerSGD rank 4", hook(CommHookKind::kPowerSgd)},
      {"post-local SGD, local, averaging /4", [](DdpOptions&) {}, true,
       PostLocalSgdOptions{0, /*gradient_allreduce_within_node=*/false, 4}},
      {"post-local SGD, local, averaging /16", [](DdpOptions&) {}, true,
       PostLocalSgdOptions{0, /*gradient_allreduce_within_node=*/false, 16}},
  };
}

absl::StatusOr<std::string> Worker(int steps) {
  ASSIGN_OR_RETURN(ClusterInfo cluster, DetectClusterEnvironment());
  ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, ProcessGroup::Create(cluster));
  torch::set_num_threads(1);
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({64, 784});
  torch::Tensor y = torch::randint(0, 10, {64});
  std::string report = absl::StrFormat("%-36s %12s %10s %10s %10s\n", "option", "ms/step",
                                       "vs default", "vs ceiling", "mean ms");
  double ceiling = 0, baseline = 0;
  for (const Config& config : Configs()) {
    auto net = torch::nn::Sequential(torch::nn::Linear(784, 1024), torch::nn::ReLU(),
                                     torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                                     torch::nn::Linear(1024, 10));
    DdpOptions options;
    config.apply(options);
    std::unique_ptr<PostLocalSgd> post_local_sgd;
    if (config.post_local_sgd) {
      ASSIGN_OR_RETURN(post_local_sgd, PostLocalSgd::Create(group.get(), *config.post_local_sgd));
      options.reducer.comm_hook = post_local_sgd->hook();
    }
    absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
        DistributedDataParallel::Wrap(net.ptr(), group.get(), options);
    if (!ddp.ok()) return ddp.status();
    torch::optim::SGD optimizer(net->parameters(), 0.01);
    std::vector<double> times;
    for (int step = 0; step < steps + 5; ++step) {
      absl::Time start = absl::Now();
      optimizer.zero_grad();
      RETURN_IF_ERROR((*ddp)->PrepareForward());
      torch::Tensor loss = torch::cross_entropy_loss(net->forward(x), y);
      if (config.sync) {
        loss.backward();
      } else {
        DistributedDataParallel::NoSync no_sync = (*ddp)->no_sync();
        loss.backward();
      }
      optimizer.step();
      if (post_local_sgd) RETURN_IF_ERROR(post_local_sgd->AfterOptimizerStep(net->parameters()));
      if (step >= 5) times.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    // The mean counts what only some steps do (post-local SGD's averaging).
    double mean = 0;
    for (double t : times) mean += t / times.size();
    if (!config.sync) ceiling = median;
    if (absl::StartsWith(config.name, "default")) baseline = median;
    absl::StrAppendFormat(&report, "%-36s %12.2f %10.2f %10.2f %10.2f\n", config.name, median,
                          baseline > 0 ? baseline / median : 0.0, ceiling / median, mean);
  }
  return report;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  int steps = 30;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::atoi(argv[i] + 8);
  }
  if (ddpspawn::IsLaunchedWorker()) {
    absl::StatusOr<std::string> report = ddpspawn::Worker(steps);
    if (!report.ok()) {
      (void)ddpspawn::SetWorkerError(report.status().ToString());
      return 1;
    }
    if (std::atoi(std::getenv("RANK")) == 0) (void)ddpspawn::SetWorkerResult(*report);
    return 0;
  }
  ddpspawn::LaunchSpec spec;
  spec.nprocs = 2;
  spec.argv = {argv[0], absl::StrCat("--steps=", steps)};
  absl::StatusOr<std::unique_ptr<ddpspawn::Job>> job = ddpspawn::Job::Create(spec);
  absl::Status status = job.ok() ? (*job)->Start() : job.status();
  if (status.ok()) status = (*job)->Wait();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::printf(
      "2 ranks, MLP 784-1024-1024-10, batch 64/rank, 1 thread/rank, median of %d steps\n"
      "(\"vs\" columns: that median over this one; > 1 is faster)\n%s",
      steps, (*job)->result()->c_str());
  return 0;
}
