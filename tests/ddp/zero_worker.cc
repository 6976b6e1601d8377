// The worker zero_redundancy_optimizer_test launches: DDP with a ZeroRedundancyOptimizer over Adam,
// each rank on its own data, against a reference every rank trains alone with plain Adam on all
// ranks' data. Usage: zero_worker <steps> Rank 0's result, space-separated key=value:
//   max_diff        the largest |parameter - reference| after <steps> steps
//   state_bytes     each rank's Adam state bytes, comma-separated
//   shard_elements  each rank's parameter elements, comma-separated
//   unsharded_state_bytes  the reference Adam's state bytes
//   consolidated_diff  the consolidated state (loaded into a plain Adam) against
//                      the reference's exp_avg and exp_avg_sq
//   resumed_diff    after 3 more steps from the consolidated state, sharded again
//   unsharded_diff  after 3 more steps from it with a plain Adam (no sharding)
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/zero_redundancy_optimizer.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"
#include "tests/testing/worker_checks.h"

namespace ddpspawn {

const char test_worker::kWorkerName[] = "zero_worker";

namespace {

using test_worker::CheckOk;
using test_worker::Fail;
using test_worker::JoinGlooGroup;

// Parameters of several sizes, so that the partition splits them unevenly.
torch::nn::Sequential MakeNet() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::Tanh(),
                               torch::nn::Linear(32, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 1));
}

// Rank r's batch at `step`.
std::pair<torch::Tensor, torch::Tensor> Batch(int rank, int step) {
  torch::manual_seed(1000 * step + rank);
  torch::Tensor x = torch::randn({16, 8});
  return {x, x.sum(1, true).sin()};
}

torch::Tensor Loss(torch::nn::Sequential& net, const torch::Tensor& x, const torch::Tensor& y) {
  return torch::mse_loss(net->forward(x), y);
}

double MaxDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

// The reference: plain Adam on every rank's batches at once (the mean of equal-sized batches' means
// is what DDP averages).
void ReferenceStep(torch::nn::Sequential& net, torch::optim::Adam& adam, int world, int step) {
  adam.zero_grad();
  std::vector<torch::Tensor> xs, ys;
  for (int r = 0; r < world; ++r) {
    auto [x, y] = Batch(r, step);
    xs.push_back(x), ys.push_back(y);
  }
  Loss(net, torch::cat(xs), torch::cat(ys)).backward();
  adam.step();
}

// One DDP step on this rank's batch with `optimizer`.
void DdpStep(torch::nn::Sequential& net, DistributedDataParallel& ddp,
             torch::optim::Optimizer& optimizer, int rank, int step) {
  optimizer.zero_grad();
  CheckOk(ddp.PrepareForward(), "prepare forward");
  auto [x, y] = Batch(rank, step);
  Loss(net, x, y).backward();
  optimizer.step();
}

OptimizerFactory AdamOver(torch::nn::Sequential& net) {
  return [&net]() -> absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> {
    return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
  };
}

double ExpAvgDiff(const torch::optim::Adam& a, const torch::optim::Adam& b,
                  const std::vector<torch::Tensor>& a_params,
                  const std::vector<torch::Tensor>& b_params) {
  double worst = 0;
  for (size_t i = 0; i < a_params.size(); ++i) {
    const auto& sa = static_cast<const torch::optim::AdamParamState&>(
        *a.state().at(a_params[i].unsafeGetTensorImpl()));
    const auto& sb = static_cast<const torch::optim::AdamParamState&>(
        *b.state().at(b_params[i].unsafeGetTensorImpl()));
    if (sa.step() != sb.step()) Fail(absl::StrCat("step ", sa.step(), " vs ", sb.step()));
    worst = std::max({worst, (sa.exp_avg() - sb.exp_avg()).abs().max().item<double>(),
                      (sa.exp_avg_sq() - sb.exp_avg_sq()).abs().max().item<double>()});
  }
  return worst;
}

int Run(int steps) {
  const std::unique_ptr<ProcessGroup> joined = JoinGlooGroup();
  ProcessGroup& group = *joined;
  const int rank = group.rank(), world = group.world_size();

  torch::nn::Sequential reference = MakeNet();
  torch::optim::Adam reference_adam(reference->parameters(), torch::optim::AdamOptions(0.01));
  torch::nn::Sequential net = MakeNet();
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Wrap(net.ptr(), &group);
  CheckOk(ddp.status(), "wrap");
  absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> zero =
      ZeroRedundancyOptimizer::Create(AdamOver(net), &group);
  CheckOk(zero.status(), "zero");
  for (int step = 0; step < steps; ++step) {
    ReferenceStep(reference, reference_adam, world, step);
    DdpStep(net, **ddp, **zero, rank, step);
  }
  std::vector<std::string> result;
  result.push_back(absl::StrCat("max_diff=", MaxDiff(net->parameters(), reference->parameters())));

  absl::StatusOr<int64_t> mine = OptimizerStateBytes((*zero)->shard_optimizer());
  absl::StatusOr<int64_t> unsharded = OptimizerStateBytes(reference_adam);
  CheckOk(mine.status(), "state bytes");
  CheckOk(unsharded.status(), "reference state bytes");
  absl::StatusOr<std::vector<at::Tensor>> shards =
      group.AllGather(at::tensor({*mine, (*zero)->shard_elements()}, at::kLong));
  CheckOk(shards.status(), "gather state sizes");
  std::vector<std::string> bytes_each, elements_each;
  for (const at::Tensor& shard : *shards) {
    bytes_each.push_back(absl::StrCat(shard[0].item<int64_t>()));
    elements_each.push_back(absl::StrCat(shard[1].item<int64_t>()));
  }
  result.push_back(absl::StrCat("state_bytes=", absl::StrJoin(bytes_each, ",")));
  result.push_back(absl::StrCat("shard_elements=", absl::StrJoin(elements_each, ",")));
  result.push_back(absl::StrCat("unsharded_state_bytes=", *unsharded));

  // Consolidated on rank 0, saved there, and handed to every rank.
  CheckOk((*zero)->ConsolidateStateDict(0), "consolidate");
  std::string saved;
  if (rank == 0) {
    torch::serialize::OutputArchive archive;
    (*zero)->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    saved = bytes.str();
  }
  absl::StatusOr<std::string> everywhere = group.BroadcastBytes(saved, 0);
  CheckOk(everywhere.status(), "broadcast state");

  // A plain Adam reads it: the unsharded state.
  torch::nn::Sequential plain_net = MakeNet();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i)
      plain_net->parameters()[i].copy_(net->parameters()[i]);
  }
  torch::optim::Adam plain(plain_net->parameters(), torch::optim::AdamOptions(0.5));
  {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(*everywhere);
    archive.load_from(bytes);
    plain.load(archive);
  }
  result.push_back(absl::StrCat(
      "consolidated_diff=",
      ExpAvgDiff(plain, reference_adam, plain_net->parameters(), reference->parameters())));

  // Sharded again from it, and unsharded: both go on as the reference does.
  torch::nn::Sequential resumed_net = MakeNet();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i)
      resumed_net->parameters()[i].copy_(net->parameters()[i]);
  }
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> resumed_ddp =
      DistributedDataParallel::Wrap(resumed_net.ptr(), &group);
  CheckOk(resumed_ddp.status(), "wrap resumed");
  absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> resumed =
      ZeroRedundancyOptimizer::Create(AdamOver(resumed_net), &group);
  CheckOk(resumed.status(), "zero resumed");
  {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(*everywhere);
    archive.load_from(bytes);
    (*resumed)->load(archive);
  }
  for (int step = steps; step < steps + 3; ++step) {
    ReferenceStep(reference, reference_adam, world, step);
    DdpStep(resumed_net, **resumed_ddp, **resumed, rank, step);
    ReferenceStep(plain_net, plain, world, step);
  }
  result.push_back(
      absl::StrCat("resumed_diff=", MaxDiff(resumed_net->parameters(), reference->parameters())));
  result.push_back(
      absl::StrCat("unsharded_diff=", MaxDiff(plain_net->parameters(), reference->parameters())));
  if (rank == 0) CheckOk(SetWorkerResult(absl::StrJoin(result, " ")), "result");
  return 0;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  int steps = 0;
  if (argc < 2 || !absl::SimpleAtoi(argv[1], &steps) || steps < 1) {
    std::fprintf(stderr, "usage: zero_worker <steps>\n");
    return 2;
  }
  return ddpspawn::Run(steps);
}
