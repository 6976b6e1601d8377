// A program with its own training loop under DDPSpawnStrategy, as a user ports one: 2 forked ranks,
// each on data of its own distribution (rank r's inputs have mean r), a model with BatchNorm, Adam.
// Each mode is one of the own-loop API's traps; rank 0's result says what happened. Usage:
//   own_loop_main MODE
// sync_bn_strategy    sync_batchnorm on the strategy, the optimizer made
//                     first, Distribute(model, strategy): "converted=N
//                     max_diff=D bn_trained=B" (SyncBatchNorm layers, the
//                     largest difference between the ranks' parameters and
//                     buffers after 3 steps, whether the optimizer moved the
//                     converted layer's weight; the other modes' max_diff
//                     compares the parameters)
// sync_bn_by_value    the same with a module held by value
// buffer_after_wrap   a buffer registered after Distribute, with each rank's
//                     own value: "buffer=V" (every rank's after a training
//                     forward: rank 0's)
// sync_bn_group       the same strategy, Distribute(model, group): refused
// convert_after_wrap  ConvertSyncBatchNorm after Distribute: refused
// distribute_twice    a second Distribute of the same model: refused
// added_after_wrap    a parameter registered after Distribute: the next
//                     training forward is refused
// dtype_after_wrap    to(kDouble) after Distribute (as a move to another
//                     device): the next forward is refused
// optimizer_before    the optimizer made before Distribute, 3 steps:
//                     "max_diff=D"
// no_sync_flag        ddp.no_sync(step % 2 == 0) on every rank, 4 backwards
//                     and 2 steps: "max_diff=D local_backwards=2"
// sampler_world       a sampler for 4 replicas in a job of 2: refused
// full_shard_distribute  Distribute(model, strategy) under sharding_strategy
//                     full_shard (its forward must run each unit through a
//                     FullShard): refused
// no_sync_one_rank    rank 1 alone under no_sync for the first of 3 steps: the
//                     job fails at the next step's buffer broadcast, which
//                     meets rank 0's all-reduce (exit code 1)
// A refusal's result is "refused: <rank 0's error>"; a refusal on rank 1 only fails the job.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/ddp/sync_batch_norm.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/strategy/distribute.h"
#include "core/train/data/torch_data_sampler.h"

namespace ddpspawn {
namespace {

std::string g_mode;  // set in main, before the ranks fork

torch::nn::Sequential MakeModel() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                               torch::nn::ReLU(), torch::nn::Linear(8, 1));
}

// A module held by value whose BatchNorm sits in a Sequential member.
struct ByValueNet : torch::nn::Module {
  ByValueNet() : net(register_module("net", MakeModel())) {}
  torch::Tensor forward(const torch::Tensor& x) { return net->forward(x); }
  torch::nn::Sequential net;
};

torch::Tensor Batch(int rank, int step) {
  torch::manual_seed(1000 * rank + step);
  return torch::randn({16, 4}) + static_cast<double>(rank);
}

// The largest difference between this rank's parameters (and buffers) and the other rank's (a
// collective). A BatchNorm's running statistics are rank 0's before each forward and the rank's own
// after it; a SyncBatchNorm's are the same on every rank.
absl::StatusOr<double> MaxDiffAcrossRanks(DDPSpawnStrategy& strategy, torch::nn::Module& model,
                                          bool with_buffers) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : model.parameters())
    flat.push_back(t.detach().flatten().to(at::kDouble));
  if (with_buffers) {
    for (const at::Tensor& t : model.buffers())
      flat.push_back(t.detach().flatten().to(at::kDouble));
  }
  absl::StatusOr<at::Tensor> all = strategy.AllGather(at::cat(flat));
  if (!all.ok()) return all.status();
  return ((*all)[0] - (*all)[1]).abs().max().item<double>();
}

// `steps` Adam steps through the wrapper, one backward each; with `accumulate`, every even step's
// backward runs under no_sync (one line, with a flag) and the next one averages both. Returns how
// many backwards ran with syncing off.
template <typename Model>
int Train(DDPSpawnStrategy& strategy, DdpModule<Model>& ddp, torch::optim::Adam& adam, int steps,
          bool accumulate) {
  int local = 0;
  for (int step = 0; step < steps; ++step) {
    const bool skip_sync = accumulate && step % 2 == 0;
    if (!accumulate || skip_sync) adam.zero_grad();
    auto no_sync = ddp.no_sync(/*enabled=*/skip_sync);
    if (!ddp.ddp().reducer().sync_enabled()) ++local;
    ddp(Batch(strategy.global_rank(), step)).square().mean().backward();
    if (!skip_sync) adam.step();
  }
  return local;
}

// "converted=N max_diff=D bn_trained=B": the model's SyncBatchNorm layers, the ranks' largest
// difference, and whether the first layer's weight left its initial ones (the optimizer, made on
// the BatchNorm's parameters before the conversion, trains the converted layer).
std::string SyncBatchNormReport(torch::nn::Module& model, double diff) {
  int converted = 0;
  bool trained = false;
  for (const auto& layer : model.modules(/*include_self=*/false)) {
    if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(layer)) {
      trained = trained ||
                (converted == 0 && !torch::equal(sync->weight, torch::ones_like(sync->weight)));
      ++converted;
    }
  }
  return absl::StrFormat("converted=%d max_diff=%g bn_trained=%d", converted, diff, trained);
}

// Rank 0's result for a call every rank should refuse.
absl::StatusOr<std::string> Refused(const absl::Status& status) {
  if (status.ok()) return absl::InternalError("not refused");
  return absl::StrCat("refused: ", status.message());
}

absl::StatusOr<std::string> Work(DDPSpawnStrategy& strategy) {
  torch::nn::Sequential model = MakeModel();
  const std::string& mode = g_mode;
  if (mode == "sync_bn_strategy" || mode == "optimizer_before" || mode == "no_sync_flag") {
    torch::optim::Adam adam(model->parameters(), 0.01);  // before Distribute: the same tensors
    absl::StatusOr<DdpModule<torch::nn::SequentialImpl>> ddp = Distribute(model, strategy);
    if (!ddp.ok()) return ddp.status();
    const bool accumulate = mode == "no_sync_flag";
    const int local = Train(strategy, *ddp, adam, accumulate ? 4 : 3, accumulate);
    absl::StatusOr<double> diff =
        MaxDiffAcrossRanks(strategy, *model, /*with_buffers=*/mode == "sync_bn_strategy");
    if (!diff.ok()) return diff.status();
    if (mode == "sync_bn_strategy") return SyncBatchNormReport(*model, *diff);
    if (mode == "no_sync_flag") {
      return absl::StrFormat("max_diff=%g local_backwards=%d", *diff, local);
    }
    return absl::StrFormat("max_diff=%g", *diff);
  }
  if (mode == "sync_bn_by_value") {
    ByValueNet net;
    torch::optim::Adam adam(net.parameters(), 0.01);
    absl::StatusOr<DdpModule<ByValueNet>> ddp = Distribute(net, strategy);
    if (!ddp.ok()) return ddp.status();
    Train(strategy, *ddp, adam, 3, /*accumulate=*/false);
    absl::StatusOr<double> diff = MaxDiffAcrossRanks(strategy, net, /*with_buffers=*/true);
    if (!diff.ok()) return diff.status();
    return SyncBatchNormReport(net, *diff);
  }
  if (mode == "buffer_after_wrap") {
    absl::StatusOr<DdpModule<torch::nn::SequentialImpl>> ddp = Distribute(model, strategy);
    if (!ddp.ok()) return ddp.status();
    at::Tensor late = model->register_buffer(
        "late", torch::full({1}, static_cast<double>(strategy.global_rank() + 5)));
    (*ddp)(Batch(strategy.global_rank(), 0)).square().mean().backward();
    absl::StatusOr<at::Tensor> all = strategy.AllGather(late);
    if (!all.ok()) return all.status();
    if (!torch::equal((*all)[0], (*all)[1]))
      return absl::InternalError("the ranks' buffers differ");
    return absl::StrFormat("buffer=%g", late.item<double>());
  }
  if (mode == "no_sync_one_rank") {  // rank 1 skips the first step's all-reduce
    torch::optim::Adam adam(model->parameters(), 0.01);
    absl::StatusOr<DdpModule<torch::nn::SequentialImpl>> ddp = Distribute(model, strategy);
    if (!ddp.ok()) return ddp.status();
    for (int step = 0; step < 3; ++step) {
      adam.zero_grad();
      auto local = ddp->no_sync(/*enabled=*/step == 0 && strategy.global_rank() == 1);
      (*ddp)(Batch(strategy.global_rank(), step)).square().mean().backward();
      adam.step();
    }
    absl::StatusOr<double> diff = MaxDiffAcrossRanks(strategy, *model, /*with_buffers=*/false);
    if (!diff.ok()) return diff.status();
    return absl::StrFormat("max_diff=%g", *diff);
  }
  if (mode == "sync_bn_group") return Refused(Distribute(model, strategy.group()).status());
  if (mode == "full_shard_distribute") return Refused(Distribute(model, strategy).status());
  if (mode == "sampler_world") {
    return Refused(PyTorchDistributedSampler::Create(64, 4, strategy.global_rank()).status());
  }
  absl::StatusOr<DdpModule<torch::nn::SequentialImpl>> ddp = Distribute(model, strategy);
  if (!ddp.ok()) return ddp.status();
  if (mode == "convert_after_wrap") return Refused(ConvertSyncBatchNorm(model.ptr()).status());
  if (mode == "distribute_twice") return Refused(Distribute(model, strategy).status());
  if (mode == "added_after_wrap") {
    model->register_parameter("late", torch::zeros({1}));
  } else if (mode == "dtype_after_wrap") {
    model->to(at::kDouble);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown mode '", mode, "'"));
  }
  return Refused(
      ddp->Forward(Batch(strategy.global_rank(), 0).to(model->parameters()[0].scalar_type()))
          .status());
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  ddpspawn::g_mode = argc > 1 ? argv[1] : "";
  ddpspawn::StrategyOptions options;
  options.parallel_devices = {c10::kCPU, c10::kCPU};
  options.start_method = ddpspawn::StartMethod::kFork;
  options.sync_batchnorm = ddpspawn::g_mode == "sync_bn_strategy" ||
                           ddpspawn::g_mode == "sync_bn_by_value" ||
                           ddpspawn::g_mode == "sync_bn_group";
  if (ddpspawn::g_mode == "full_shard_distribute") {
    options.sharding_strategy = ddpspawn::ShardingStrategy::kFullShard;
  }
  ddpspawn::DDPSpawnStrategy strategy(options);
  absl::StatusOr<std::string> result = strategy.Launch(ddpspawn::Work);
  if (!result.ok()) {
    std::printf("failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("result: %s\n", result->c_str());
  return 0;
}
