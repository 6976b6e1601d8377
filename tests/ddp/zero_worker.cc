// The worker zero_redundancy_optimizer_test launches: DDP with a sharded optimizer over one of
// torch::optim's optimizers, each rank on its own data, against a reference every rank trains alone
// with the plain optimizer on all ranks' data. Usage:
//   zero_worker <steps> <optimizer> <stage> [accumulate_clip]
//   zero_worker <steps> <optimizer> <stage> save:<dir> | load:<dir>
// the optimizer one of adam, adamw, adagrad, rmsprop, sgd (with momentum); the stage zero1
// (ZeroRedundancyOptimizer after DDP's all-reduce), zero1_chunked (the same, its all-gather in
// chunks of 64 bytes of buffer, a few elements from each rank: dozens of chunks a step, parameters
// across chunk boundaries), shard_grad_op (the reducer's shard_gradients with a
// ShardGradOpOptimizer), full_shard (FullShard, each Linear a unit), full_shard_keep (the same
// without reshard_after_forward) or full_shard_auto (SizeBasedUnits at 200 parameters: the first
// two Linears, and the root holding the last, whole for the whole forward). accumulate_clip: each
// step accumulates two batches (the first under no_sync) and clips the gradients' global norm to
// 0.05, everywhere. Rank 0's result, space-separated key=value:
//   max_diff        the largest |parameter - reference| after <steps> steps
//   vs_ddp_diff     the same against DDP with the plain optimizer (no sharding), on the same data
//   state_bytes     each rank's optimizer state bytes, comma-separated
//   shard_elements  each rank's parameter elements, comma-separated
//   unsharded_state_bytes  the reference's state bytes
//   consolidated_diff  the consolidated state (loaded into a plain optimizer) against the
//                      reference's state tensors
//   resumed_diff    after 3 more steps from the consolidated state, sharded again
//   unsharded_diff  after 3 more steps from it with a plain optimizer (no sharding)
//   full_grads      parameters with a defined .grad after the last backward, each rank
//   grad_shard_elements  elements of the gradients the sharded step reads, each rank
//   state_memory    tensor bytes one model keeps between steps on each rank (parameters, gradient
//                   buffers, optimizer state), sharded as <stage> says (tensor_memory.h's count)
//   ddp_state_memory  the same for DDP with the plain optimizer
//   whole_parameter_bytes  full_shard: parameter bytes whole between steps, each rank
//   peak_whole_parameter_bytes  full_shard: the most parameter bytes whole at once in the last
//                   step, each rank
//   prefetched_in_forward, prefetched_in_backward  full_shard: the units' all-gathers started
//                   ahead of their unit in forwards and in backwards, all the steps, each rank
//                   (none where the gathers run through shared memory)
// save:<dir> (shard_grad_op or full_shard) trains <steps> steps and writes a sharded checkpoint to
// <dir> twice (after step <steps> - 1, then replacing it, after step <steps>), and, from rank 0,
// <dir>.reference: the weights and the consolidated optimizer state. load:<dir>, on any number of
// ranks, loads that checkpoint into a fresh model and reports:
//   loaded_weight_diff  the weights against the reference's
//   loaded_state_diff   the optimizer state, consolidated, against the reference's
//   shards_read     the saved shards each rank read, '+'-separated, ranks comma-separated
//   saved_world     the number of ranks that saved it
//   resumed_diff    after 3 more steps on this number of ranks, against a plain optimizer that
//                   loaded the reference and took the same steps on every rank's batches
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/full_shard.h"
#include "core/ddp/gradient_clipping.h"
#include "core/ddp/shard_grad_op_optimizer.h"
#include "core/ddp/size_based_units.h"
#include "core/ddp/zero_redundancy_optimizer.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"
#include "core/model/sharded_checkpoint.h"
#include "core/util/tensor_memory.h"
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

struct Mode {
  bool shard_grad_op = false;
  bool full_shard = false;  // with shard_grad_op
  bool reshard_after_forward = true;
  bool size_based_units = false;  // full_shard's units by SizeBasedUnits, not each Linear
  int64_t gather_buffer_bytes = int64_t{4} << 20;  // ZeRO-1's default
  bool accumulate = false;                         // two batches a step, the first under no_sync
  double clip = 0;  // the gradients' global norm clipped to this (0: not clipped)
};

// Rank r's batch `micro` of `step`.
std::pair<torch::Tensor, torch::Tensor> Batch(int rank, int step, int micro = 0) {
  torch::manual_seed(1000 * step + 100 * micro + rank);
  torch::Tensor x = torch::randn({16, 8});
  return {x, x.sum(1, true).sin()};
}

// The loss of `net` on (x, y), its forward through `fsdp`'s units when given.
torch::Tensor Loss(torch::nn::Sequential& net, const torch::Tensor& x, const torch::Tensor& y,
                   FullShard* fsdp = nullptr) {
  if (fsdp == nullptr) return torch::mse_loss(net->forward(x), y);
  absl::StatusOr<torch::Tensor> out = fsdp->ForwardSequential(*net, x);
  CheckOk(out.status(), "full_shard forward");
  return torch::mse_loss(*out, y);
}

double MaxDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

// The optimizer `name` over `parameters`, at learning rate `lr` (a loaded state brings its own).
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const std::string& name,
                                                       const std::vector<torch::Tensor>& parameters,
                                                       double lr) {
  namespace optim = torch::optim;
  if (name == "adam") return std::make_unique<optim::Adam>(parameters, optim::AdamOptions(lr));
  if (name == "adamw") return std::make_unique<optim::AdamW>(parameters, optim::AdamWOptions(lr));
  if (name == "adagrad") {
    return std::make_unique<optim::Adagrad>(parameters, optim::AdagradOptions(lr));
  }
  if (name == "rmsprop") {
    return std::make_unique<optim::RMSprop>(parameters, optim::RMSpropOptions(lr));
  }
  if (name == "sgd") {
    return std::make_unique<optim::SGD>(parameters, optim::SGDOptions(lr).momentum(0.9));
  }
  Fail(absl::StrCat("unknown optimizer ", name));
  return nullptr;
}

// The reference: the plain optimizer on every rank's batches at once (the mean of equal-sized
// batches' means is what DDP averages).
void ReferenceStep(torch::nn::Sequential& net, torch::optim::Optimizer& optimizer, int world,
                   int step, const Mode& mode) {
  optimizer.zero_grad();
  for (int micro = mode.accumulate ? 1 : 0; micro >= 0; --micro) {
    std::vector<torch::Tensor> xs, ys;
    for (int r = 0; r < world; ++r) {
      auto [x, y] = Batch(r, step, micro);
      xs.push_back(x), ys.push_back(y);
    }
    Loss(net, torch::cat(xs), torch::cat(ys)).backward();
  }
  if (mode.clip > 0) {
    CheckOk(ClipParameterGradientNorm(net->parameters(), mode.clip, 2.0, "parameter").status(),
            "clip");
  }
  optimizer.step();
}

// One DDP step on this rank's batches with `optimizer`, a sharded one clipped over its shards; the
// forward through `fsdp`'s units when given.
void DdpStep(torch::nn::Sequential& net, DistributedDataParallel& ddp,
             torch::optim::Optimizer& optimizer, int rank, int step, const Mode& mode,
             FullShard* fsdp = nullptr) {
  optimizer.zero_grad();
  if (mode.accumulate) {
    DistributedDataParallel::NoSync local = ddp.no_sync();
    CheckOk(ddp.PrepareForward(), "prepare forward");
    auto [x, y] = Batch(rank, step, 1);
    Loss(net, x, y, fsdp).backward();
  }
  CheckOk(ddp.PrepareForward(), "prepare forward");
  auto [x, y] = Batch(rank, step);
  Loss(net, x, y, fsdp).backward();
  if (mode.clip > 0) {
    auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer);
    CheckOk(
        sharded != nullptr
            ? ClipParameterGradientNorm(sharded->StepGradientHolders(), mode.clip, 2.0, "parameter",
                                        sharded->gradient_shard_group())
                  .status()
            : ClipParameterGradientNorm(net->parameters(), mode.clip, 2.0, "parameter").status(),
        "clip");
  }
  optimizer.step();
}

OptimizerFactory OptimizerOver(const std::string& name, torch::nn::Sequential& net) {
  return [name, &net]() -> absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> {
    return MakeOptimizer(name, net->parameters(), 0.01);
  };
}

// A stage's wrapper of a model and its sharded optimizer.
struct Sharded {
  std::unique_ptr<DistributedDataParallel> owned_ddp;  // not full_shard
  std::unique_ptr<FullShard> fsdp;                     // full_shard
  std::unique_ptr<ShardedOptimizer> optimizer;
  DistributedDataParallel& ddp() { return fsdp ? fsdp->ddp() : *owned_ddp; }
  void Step(torch::nn::Sequential& net, int rank, int step, const Mode& mode) {
    DdpStep(net, ddp(), *optimizer, rank, step, mode, fsdp.get());
  }
  // Every parameter whole, for reading them (full_shard), until Reshard().
  void Gather() {
    if (fsdp) CheckOk(fsdp->GatherAll(), "gather all");
  }
  void Reshard() {
    if (fsdp) CheckOk(fsdp->ReshardAll(), "reshard all");
  }
};

// full_shard's wrapper of `net`: each Linear a unit.
Sharded FullyShard(const std::string& name, torch::nn::Sequential& net, ProcessGroup& group,
                   const Mode& mode) {
  FullShardOptions options;
  options.reshard_after_forward = mode.reshard_after_forward;
  std::vector<std::shared_ptr<torch::nn::Module>> units;
  for (const std::shared_ptr<torch::nn::Module>& child : net->children()) {
    if (!child->parameters().empty()) units.push_back(child);
  }
  if (mode.size_based_units) units = SizeBasedUnits(net.ptr(), 200);
  Sharded sharded;
  absl::StatusOr<std::unique_ptr<FullShard>> fsdp =
      FullShard::Wrap(net.ptr(), units, &group, options);
  CheckOk(fsdp.status(), "full_shard wrap");
  sharded.fsdp = *std::move(fsdp);
  absl::StatusOr<std::unique_ptr<ShardGradOpOptimizer>> made =
      sharded.fsdp->MakeOptimizer(OptimizerOver(name, net));
  CheckOk(made.status(), "full_shard optimizer");
  sharded.optimizer = *std::move(made);
  return sharded;
}

// The stage's wrapper of `net` and its sharded optimizer.
Sharded Shard(const std::string& name, torch::nn::Sequential& net, ProcessGroup& group,
              const Mode& mode) {
  if (mode.full_shard) return FullyShard(name, net, group, mode);
  DdpOptions options;
  options.reducer.shard_gradients = mode.shard_grad_op;
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Wrap(net.ptr(), &group, options);
  CheckOk(ddp.status(), "wrap");
  std::unique_ptr<ShardedOptimizer> optimizer;
  if (mode.shard_grad_op) {
    absl::StatusOr<std::unique_ptr<ShardGradOpOptimizer>> made =
        ShardGradOpOptimizer::Create(OptimizerOver(name, net), **ddp);
    CheckOk(made.status(), "shard_grad_op optimizer");
    optimizer = *std::move(made);
  } else {
    absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> made =
        ZeroRedundancyOptimizer::Create(OptimizerOver(name, net), &group, mode.gather_buffer_bytes);
    CheckOk(made.status(), "zero");
    optimizer = *std::move(made);
  }
  Sharded sharded;
  sharded.owned_ddp = *std::move(ddp);
  sharded.optimizer = std::move(optimizer);
  return sharded;
}

// The largest difference between the state tensors of `a` and `b`, parameter by parameter.
double StateDiff(const torch::optim::Optimizer& a, const torch::optim::Optimizer& b,
                 const std::vector<torch::Tensor>& a_params,
                 const std::vector<torch::Tensor>& b_params) {
  double worst = 0;
  for (size_t i = 0; i < a_params.size(); ++i) {
    absl::StatusOr<std::vector<at::Tensor>> sa =
        OptimizerStateTensors(*a.state().at(a_params[i].unsafeGetTensorImpl()));
    absl::StatusOr<std::vector<at::Tensor>> sb =
        OptimizerStateTensors(*b.state().at(b_params[i].unsafeGetTensorImpl()));
    CheckOk(sa.status(), "state tensors");
    CheckOk(sb.status(), "state tensors");
    if (sa->size() != sb->size()) Fail(absl::StrCat("parameter ", i, ": state sizes differ"));
    for (size_t k = 0; k < sa->size(); ++k) {
      worst = std::max(worst, ((*sa)[k] - (*sb)[k]).abs().max().item<double>());
    }
  }
  return worst;
}

// Tensor bytes that one model's training keeps on this rank between steps: counted across building
// it (DDP with the stage's sharded optimizer, or with the plain one) and one step, its gradients
// then set to none.
int64_t ModelStateBytes(const std::string& name, ProcessGroup& group, const Mode& mode,
                        bool sharded) {
  const int64_t before = SettledLiveTensorBytes();
  torch::nn::Sequential net = MakeNet();
  Mode one_batch = mode;
  one_batch.accumulate = false;
  one_batch.clip = 0;
  if (sharded) {
    Sharded wrapped = Shard(name, net, group, one_batch);
    wrapped.Step(net, group.rank(), 0, one_batch);
    wrapped.optimizer->zero_grad();
    return SettledLiveTensorBytes() - before;
  }
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Wrap(net.ptr(), &group);
  CheckOk(ddp.status(), "wrap");
  std::unique_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(name, net->parameters(), 0.01);
  DdpStep(net, **ddp, *optimizer, group.rank(), 0, one_batch);
  optimizer->zero_grad();
  return SettledLiveTensorBytes() - before;
}

// Gathers one number from every rank: comma-separated, in rank order.
std::string FromEveryRank(ProcessGroup& group, int64_t mine) {
  std::vector<int64_t> all(group.world_size());
  CheckOk(group.AllGather(&mine, 1, DType::kInt64, all.data()), "gather");
  return absl::StrJoin(all, ",");
}

int Run(int steps, const std::string& name, const Mode& mode) {
  InstallTensorMemoryCounter();
  const std::unique_ptr<ProcessGroup> joined = JoinGlooGroup();
  ProcessGroup& group = *joined;
  const int rank = group.rank(), world = group.world_size();
  const int64_t state_memory = ModelStateBytes(name, group, mode, /*sharded=*/true);
  const int64_t ddp_state_memory = ModelStateBytes(name, group, mode, /*sharded=*/false);

  torch::nn::Sequential reference = MakeNet();
  std::unique_ptr<torch::optim::Optimizer> reference_optimizer =
      MakeOptimizer(name, reference->parameters(), 0.01);
  torch::nn::Sequential net = MakeNet();
  Sharded wrapped = Shard(name, net, group, mode);
  DistributedDataParallel* ddp = &wrapped.ddp();
  ShardedOptimizer* zero = wrapped.optimizer.get();
  torch::nn::Sequential unsharded_net = MakeNet();
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> unsharded_ddp =
      DistributedDataParallel::Wrap(unsharded_net.ptr(), &group);
  CheckOk(unsharded_ddp.status(), "wrap unsharded");
  std::unique_ptr<torch::optim::Optimizer> unsharded_optimizer =
      MakeOptimizer(name, unsharded_net->parameters(), 0.01);
  int64_t full_grads = 0, grad_shard_elements = 0, peak_whole = 0;
  for (int step = 0; step < steps; ++step) {
    ReferenceStep(reference, *reference_optimizer, world, step, mode);
    if (wrapped.fsdp) wrapped.fsdp->ResetPeakWholeParameterBytes();
    wrapped.Step(net, rank, step, mode);
    if (wrapped.fsdp) peak_whole = wrapped.fsdp->peak_whole_parameter_bytes();
    DdpStep(unsharded_net, **unsharded_ddp, *unsharded_optimizer, rank, step, mode);
  }
  // What the last backward left: a fresh one, since the step above consumed its gradients.
  zero->zero_grad();
  CheckOk(ddp->PrepareForward(), "prepare forward");
  Loss(net, Batch(rank, steps).first, Batch(rank, steps).second, wrapped.fsdp.get()).backward();
  for (const torch::Tensor& p : net->parameters()) full_grads += p.grad().defined() ? 1 : 0;
  const int64_t whole_between_steps = wrapped.fsdp ? wrapped.fsdp->WholeParameterBytes() : -1;
  for (const at::Tensor& holder : zero->StepGradientHolders()) {
    grad_shard_elements += holder.grad().defined() ? holder.grad().numel() : 0;
  }
  zero->zero_grad();
  wrapped.Gather();
  std::vector<std::string> result;
  result.push_back(absl::StrCat("max_diff=", MaxDiff(net->parameters(), reference->parameters())));
  result.push_back(
      absl::StrCat("vs_ddp_diff=", MaxDiff(net->parameters(), unsharded_net->parameters())));

  absl::StatusOr<int64_t> mine = OptimizerStateBytes(zero->shard_optimizer());
  absl::StatusOr<int64_t> unsharded = OptimizerStateBytes(*reference_optimizer);
  CheckOk(mine.status(), "state bytes");
  CheckOk(unsharded.status(), "reference state bytes");
  absl::StatusOr<std::vector<at::Tensor>> shards =
      group.AllGather(at::tensor({*mine, zero->shard_elements()}, at::kLong));
  CheckOk(shards.status(), "gather state sizes");
  std::vector<std::string> bytes_each, elements_each;
  for (const at::Tensor& shard : *shards) {
    bytes_each.push_back(absl::StrCat(shard[0].item<int64_t>()));
    elements_each.push_back(absl::StrCat(shard[1].item<int64_t>()));
  }
  result.push_back(absl::StrCat("state_bytes=", absl::StrJoin(bytes_each, ",")));
  result.push_back(absl::StrCat("shard_elements=", absl::StrJoin(elements_each, ",")));
  result.push_back(absl::StrCat("unsharded_state_bytes=", *unsharded));
  result.push_back(absl::StrCat("full_grads=", FromEveryRank(group, full_grads)));
  result.push_back(absl::StrCat("state_memory=", FromEveryRank(group, state_memory)));
  result.push_back(absl::StrCat("ddp_state_memory=", FromEveryRank(group, ddp_state_memory)));
  result.push_back(absl::StrCat("grad_shard_elements=", FromEveryRank(group, grad_shard_elements)));
  result.push_back(
      absl::StrCat("whole_parameter_bytes=", FromEveryRank(group, whole_between_steps)));
  result.push_back(absl::StrCat("peak_whole_parameter_bytes=", FromEveryRank(group, peak_whole)));
  const FullShard::PrefetchCounts prefetched =
      wrapped.fsdp ? wrapped.fsdp->prefetched_gathers() : FullShard::PrefetchCounts{};
  result.push_back(
      absl::StrCat("prefetched_in_forward=", FromEveryRank(group, prefetched.forward)));
  result.push_back(
      absl::StrCat("prefetched_in_backward=", FromEveryRank(group, prefetched.backward)));

  // Consolidated on rank 0 (full_shard's parameters sharded meanwhile: it needs none whole), saved
  // there, and handed to every rank.
  wrapped.Reshard();
  CheckOk(zero->ConsolidateStateDict(0), "consolidate");
  wrapped.Gather();
  std::string saved;
  if (rank == 0) {
    torch::serialize::OutputArchive archive;
    zero->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    saved = bytes.str();
  }
  absl::StatusOr<std::string> everywhere = group.BroadcastBytes(saved, 0);
  CheckOk(everywhere.status(), "broadcast state");

  // A plain optimizer reads it: the unsharded state.
  torch::nn::Sequential plain_net = MakeNet();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i)
      plain_net->parameters()[i].copy_(net->parameters()[i]);
  }
  std::unique_ptr<torch::optim::Optimizer> plain =
      MakeOptimizer(name, plain_net->parameters(), 0.5);
  {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(*everywhere);
    archive.load_from(bytes);
    plain->load(archive);
  }
  result.push_back(absl::StrCat(
      "consolidated_diff=",
      StateDiff(*plain, *reference_optimizer, plain_net->parameters(), reference->parameters())));

  // Sharded again from it, and unsharded: both go on as the reference does.
  torch::nn::Sequential resumed_net = MakeNet();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i)
      resumed_net->parameters()[i].copy_(net->parameters()[i]);
  }
  Sharded resumed = Shard(name, resumed_net, group, mode);
  {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(*everywhere);
    archive.load_from(bytes);
    resumed.optimizer->load(archive);
  }
  for (int step = steps; step < steps + 3; ++step) {
    ReferenceStep(reference, *reference_optimizer, world, step, mode);
    resumed.Step(resumed_net, rank, step, mode);
    ReferenceStep(plain_net, *plain, world, step, mode);
  }
  resumed.Gather();
  result.push_back(
      absl::StrCat("resumed_diff=", MaxDiff(resumed_net->parameters(), reference->parameters())));
  result.push_back(
      absl::StrCat("unsharded_diff=", MaxDiff(plain_net->parameters(), reference->parameters())));
  if (rank == 0) CheckOk(SetWorkerResult(absl::StrJoin(result, " ")), "result");
  return 0;
}

// The module's parameters by name, as a sharded checkpoint names them.
NamedTensors NamedParameters(torch::nn::Sequential& net) {
  NamedTensors named;
  for (const auto& item : net->named_parameters()) named.emplace_back(item.key(), item.value());
  return named;
}

ShardGradOpOptimizer& ShardGradOp(Sharded& sharded) {
  return dynamic_cast<ShardGradOpOptimizer&>(*sharded.optimizer);
}

// save:<dir>: see the top of the file.
int SaveCheckpoint(int steps, const std::string& name, const Mode& mode, const std::string& dir) {
  const std::unique_ptr<ProcessGroup> joined = JoinGlooGroup();
  ProcessGroup& group = *joined;
  const int rank = group.rank();
  torch::nn::Sequential net = MakeNet();
  Sharded wrapped = Shard(name, net, group, mode);
  for (int step = 0; step < steps; ++step) {
    wrapped.Step(net, rank, step, mode);
    // The first save is replaced by the second.
    if (step >= steps - 2) {
      CheckOk(SaveShardedCheckpoint(dir, NamedParameters(net), ShardGradOp(wrapped),
                                    absl::StrCat("step=", step + 1)),
              "save the sharded checkpoint");
    }
  }
  CheckOk(wrapped.optimizer->ConsolidateStateDict(0), "consolidate");
  wrapped.Gather();
  if (rank == 0) {
    torch::serialize::OutputArchive archive, state;
    wrapped.optimizer->save(state);
    archive.write("optimizer", state);
    for (const auto& [key, value] : NamedParameters(net)) archive.write(key, value.detach());
    archive.save_to(dir + ".reference");
    CheckOk(SetWorkerResult("saved=1"), "result");
  }
  wrapped.Reshard();
  return 0;
}

// load:<dir>: see the top of the file.
int LoadCheckpoint(const std::string& name, const Mode& mode, const std::string& dir) {
  const std::unique_ptr<ProcessGroup> joined = JoinGlooGroup();
  ProcessGroup& group = *joined;
  const int rank = group.rank(), world = group.world_size();
  // The reference: the saved weights and the consolidated state, in a plain optimizer.
  torch::nn::Sequential reference = MakeNet();
  std::unique_ptr<torch::optim::Optimizer> reference_optimizer =
      MakeOptimizer(name, reference->parameters(), 0.5);
  {
    torch::serialize::InputArchive archive, state;
    archive.load_from(dir + ".reference");
    torch::NoGradGuard no_grad;
    for (const auto& [key, value] : NamedParameters(reference)) {
      torch::Tensor saved;
      archive.read(key, saved);
      value.copy_(saved);
    }
    archive.read("optimizer", state);
    reference_optimizer->load(state);
  }
  torch::manual_seed(99);  // other weights than the saved ones
  torch::nn::Sequential net =
      torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::Tanh(), torch::nn::Linear(32, 16),
                            torch::nn::Tanh(), torch::nn::Linear(16, 1));
  Sharded wrapped = Shard(name, net, group, mode);
  absl::StatusOr<ShardedCheckpointLoad> loaded =
      LoadShardedCheckpoint(dir, NamedParameters(net), ShardGradOp(wrapped));
  CheckOk(loaded.status(), "load the sharded checkpoint");
  int saved_step = 0;
  if (!absl::SimpleAtoi(absl::StripPrefix(loaded->extra, "step="), &saved_step)) {
    Fail(absl::StrCat("extra bytes came back as '", loaded->extra, "'"));
  }
  std::vector<std::string> read;
  for (int k : loaded->shards_read) read.push_back(absl::StrCat(k));
  absl::StatusOr<std::vector<std::string>> read_everywhere =
      group.AllGatherBytes(absl::StrJoin(read, "+"));
  CheckOk(read_everywhere.status(), "gather shards read");
  std::vector<std::string> result;
  wrapped.Gather();
  result.push_back(
      absl::StrCat("loaded_weight_diff=", MaxDiff(net->parameters(), reference->parameters())));
  wrapped.Reshard();
  CheckOk(wrapped.optimizer->ConsolidateStateDict(0), "consolidate");
  if (rank == 0) {
    torch::serialize::OutputArchive archive;
    wrapped.optimizer->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    torch::nn::Sequential plain_net = MakeNet();
    std::unique_ptr<torch::optim::Optimizer> plain =
        MakeOptimizer(name, plain_net->parameters(), 0.5);
    torch::serialize::InputArchive in;
    std::istringstream from(bytes.str());
    in.load_from(from);
    plain->load(in);
    result.push_back(absl::StrCat(
        "loaded_state_diff=",
        StateDiff(*plain, *reference_optimizer, plain_net->parameters(), reference->parameters())));
  }
  result.push_back(absl::StrCat("shards_read=", absl::StrJoin(*read_everywhere, ",")));
  result.push_back(absl::StrCat("saved_world=", loaded->saved_world_size));
  result.push_back(absl::StrCat("saved_step=", saved_step));
  for (int step = saved_step; step < saved_step + 3; ++step) {
    wrapped.Step(net, rank, step, mode);
    ReferenceStep(reference, *reference_optimizer, world, step, mode);
  }
  wrapped.Gather();
  result.push_back(
      absl::StrCat("resumed_diff=", MaxDiff(net->parameters(), reference->parameters())));
  wrapped.Reshard();
  if (rank == 0) CheckOk(SetWorkerResult(absl::StrJoin(result, " ")), "result");
  return 0;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  int steps = 0;
  const std::string stage = argc > 3 ? argv[3] : "";
  const std::string extra = argc > 4 ? argv[4] : "";
  const bool save = absl::StartsWith(extra, "save:"), load = absl::StartsWith(extra, "load:");
  if (argc < 4 || argc > 5 || !absl::SimpleAtoi(argv[1], &steps) || steps < 1 ||
      (stage != "zero1" && stage != "zero1_chunked" && stage != "shard_grad_op" &&
       stage != "full_shard" && stage != "full_shard_keep" && stage != "full_shard_auto") ||
      (argc == 5 && extra != "accumulate_clip" && !save && !load) ||
      ((save || load) && (stage == "zero1" || stage == "zero1_chunked"))) {
    std::fprintf(stderr,
                 "usage: zero_worker <steps> <optimizer> "
                 "zero1|zero1_chunked|shard_grad_op|full_shard|full_shard_keep|full_shard_auto "
                 "[accumulate_clip]\n"
                 "       zero_worker <steps> <optimizer> shard_grad_op|full_shard|full_shard_keep "
                 "save:<dir>|load:<dir>\n");
    return 2;
  }
  ddpspawn::Mode mode;
  mode.full_shard =
      stage == "full_shard" || stage == "full_shard_keep" || stage == "full_shard_auto";
  mode.size_based_units = stage == "full_shard_auto";
  if (stage == "zero1_chunked") mode.gather_buffer_bytes = 64;
  mode.reshard_after_forward = stage != "full_shard_keep";
  mode.shard_grad_op = stage == "shard_grad_op" || mode.full_shard;
  mode.accumulate = extra == "accumulate_clip";
  mode.clip = mode.accumulate ? 0.05 : 0;
  if (save) return ddpspawn::SaveCheckpoint(steps, argv[2], mode, extra.substr(5));
  if (load) return ddpspawn::LoadCheckpoint(argv[2], mode, extra.substr(5));
  return ddpspawn::Run(steps, argv[2], mode);
}
