// The worker ddp_forward_test launches: a model with BatchNorm trained in the natural LibTorch
// loop, each rank on data of its own distribution. Usage:
//   forward_worker holder|by_value|forgot
// holder / by_value: the model (a TORCH_MODULE holder, or a module held by value) is wrapped with
// Distribute() and called as a module; at every step the buffers its forward starts from must be
// rank 0's on every rank. Rank 0's result: "buffers_checked=<steps>". forgot:
// DistributedDataParallel::Wrap, then the module's own forward; the first backward must fail with
// the error that says so. Result (rank 0): "refused: <the error>".
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/comm/process_group.h"
#include "core/ddp/ddp_module.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"
#include "tests/testing/worker_checks.h"

namespace ddpspawn {

const char test_worker::kWorkerName[] = "forward_worker";

namespace {

using test_worker::CheckOk;
using test_worker::Fail;
using test_worker::JoinGlooGroup;

// Linear, BatchNorm, Linear; remembers the running mean its forward started from.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : in(register_module("in", torch::nn::Linear(4, 8))),
        norm(register_module("norm", torch::nn::BatchNorm1d(8))),
        out(register_module("out", torch::nn::Linear(8, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    started_from = norm->running_mean.clone();
    return out->forward(torch::relu(norm->forward(in->forward(x))));
  }
  torch::nn::Linear in;
  torch::nn::BatchNorm1d norm;
  torch::nn::Linear out;
  torch::Tensor started_from;
};
TORCH_MODULE(Net);

// Rank r's batch at `step`: its mean is r, so the ranks' running statistics differ unless rank 0's
// are taken before each forward.
torch::Tensor Batch(int rank, int step) {
  torch::manual_seed(1000 * rank + step);
  return torch::randn({16, 4}) + static_cast<double>(rank);
}

// Every rank's started_from must equal rank 0's.
void CheckStartedFromRankZero(ProcessGroup& group, const torch::Tensor& started_from, int step) {
  at::Tensor mine = started_from.contiguous();
  absl::StatusOr<std::vector<at::Tensor>> all = group.AllGather(mine);
  CheckOk(all.status(), "all-gather");
  for (int r = 1; r < group.world_size(); ++r) {
    if (!torch::equal((*all)[r], (*all)[0])) {
      Fail(absl::StrCat("step ", step, ": rank ", r, "'s forward started from running_mean ",
                        (*all)[r].sum().item<double>(), ", not rank 0's ",
                        (*all)[0].sum().item<double>()));
    }
  }
}

template <typename Model>
int TrainNaturally(ProcessGroup& group, Model& model, NetImpl& net) {
  absl::StatusOr<DdpModule<NetImpl>> ddp = Distribute(model, &group);
  CheckOk(ddp.status(), "distribute");
  torch::optim::SGD optimizer(net.parameters(), 0.1);
  constexpr int kSteps = 4;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    torch::Tensor output = (*ddp)(Batch(group.rank(), step));
    output.square().mean().backward();
    optimizer.step();
    CheckStartedFromRankZero(group, net.started_from, step);
  }
  if (group.rank() == 0)
    CheckOk(SetWorkerResult(absl::StrCat("buffers_checked=", kSteps)), "result");
  return 0;
}

int Run(const std::string& mode) {
  const std::unique_ptr<ProcessGroup> joined = JoinGlooGroup();
  ProcessGroup& group = *joined;
  if (mode == "holder") {
    Net net;
    return TrainNaturally(group, net, *net);
  }
  if (mode == "by_value") {
    NetImpl net;
    return TrainNaturally(group, net, net);
  }
  if (mode == "forgot") {
    Net net;
    absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
        DistributedDataParallel::Wrap(net.ptr(), &group);
    CheckOk(ddp.status(), "wrap");
    try {
      net->forward(Batch(group.rank(), 0)).square().mean().backward();
    } catch (const std::exception& e) {
      if (group.rank() == 0)
        CheckOk(SetWorkerResult(absl::StrCat("refused: ", e.what())), "result");
      return 0;
    }
    Fail("a backward without PrepareForward was not refused");
  }
  Fail(absl::StrCat("unknown mode '", mode, "'"));
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) { return ddpspawn::Run(argc > 1 ? argv[1] : ""); }
