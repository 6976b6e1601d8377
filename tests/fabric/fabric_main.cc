// A program whose own loop runs under ddpspawn::Fabric, as a user writes one: 2 forked ranks. Each
// mode checks some of Fabric's verbs; the launching process prints "result: <rank 0's result>", or
// "failed: <the job's error>" and exits 1. Usage: fabric_main MODE [DIR]
// train        4 SGD steps of 2 micro-batches each (the first under NoBackwardSync), gradients
//              clipped to norm 0.05; each rank trains on its half of every batch. Rank 0 then
//              trains the same model alone on the whole batches: "max_diff=D norm_diff=N
//              clipped=C synced=S" (the largest weight difference, the largest relative
//              difference of the clipped norms, how many steps clipped, how many backwards
//              synchronized); with DIR, rank 0 writes the parameters, flattened in order, one
//              value a line, before training to DIR/initial.txt and after to DIR/weights.txt,
//              writes every micro-batch it draws to DIR/inputs.txt (16 rows of 4, step by step),
//              and Save()s DIR/final.ckpt (the Fabric conformance tests of Python, Rust and Java
//              run the same loop from the same start and compare; Rust's and Java's read the
//              checkpoint too)
// collectives  "mean=M sum=S gathered=G from_rank_1=T bytes=B" of AllReduce, AllGather and both
//              Broadcasts of each rank's number
// save_load    2 steps, Save(DIR/fabric.ckpt), Load into a fresh model and optimizer: "step=S
//              max_diff=D momentum_diff=M"
// log          each rank logs rank*100+step at steps 0..2 into DIR: "logged"
// autocast     bf16-mixed: "dtype=<the wrapped model's output dtype>"
// nan_on_rank_1  rank 1's gradients are NaN at ClipGradients: the job fails
// shard_grad_op, zero1  train's loop with the optimizer from SetupOptimizer() (ZeRO-2, ZeRO-1),
//              against rank 0 alone; Save(DIR/sharded.ckpt), Load() into a fresh plain model and
//              SGD: "max_diff=D norm_diff=N clipped=C full_grads=F shard_elements=E0,E1
//              loaded_diff=L momentum_diff=M" (F: parameters with a whole gradient after the last
//              backward on rank 0; E: the parameter elements each rank steps; L and M: the loaded
//              weights and momentum against the ones rank 0 trained alone)
// plain_under_shard_grad_op  a plain SGD under shard_grad_op, and Backward(): the job fails
#include <torch/torch.h>

#include <cstdio>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "core/ddp/sharded_optimizer.h"
#include "core/fabric/fabric.h"

namespace {

std::string g_mode;
std::string g_dir;

torch::nn::Sequential MakeModel() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
}

// Batch `step`, micro-batch `micro`: 16 rows, of which rank r of 2 takes rows 8r..8r+7.
torch::Tensor Inputs(int step, int micro) {
  torch::manual_seed(100 * step + micro);
  return torch::randn({16, 4});
}

double MaxDiff(torch::nn::Module& a, torch::nn::Module& b) {
  double diff = 0;
  auto pa = a.parameters();
  auto pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    diff = std::max(diff, (pa[i] - pb[i]).abs().max().item<double>());
  }
  return diff;
}

constexpr int kSteps = 4;
constexpr double kMaxNorm = 0.05;

// The loop, on `rows` of each batch; `no_sync(enabled)` returns what to hold while a micro-batch's
// backward must not synchronize. Returns each step's clipped norm.
template <typename Forward, typename NoSync, typename Clip>
std::vector<double> TrainLoop(torch::optim::Optimizer& optimizer, Forward&& forward,
                              NoSync&& no_sync, Clip&& clip, int64_t first_row, int64_t rows) {
  std::vector<double> norms;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      auto guard = no_sync(micro == 0);
      (void)guard;
      torch::Tensor x = Inputs(step, micro).narrow(0, first_row, rows);
      forward(x).sub(x.sum(1, /*keepdim=*/true)).square().mean().backward();
    }
    norms.push_back(clip());
    optimizer.step();
  }
  return norms;
}

// `tensors`, flattened in order, one value a line (9 digits: a float exactly).
void WriteValues(const std::vector<torch::Tensor>& tensors, const std::string& path) {
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) throw std::runtime_error("cannot write " + path);
  for (const torch::Tensor& p : tensors) {
    const torch::Tensor flat = p.detach().flatten().contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i) std::fprintf(out, "%.9g\n", flat[i].item<float>());
  }
  std::fclose(out);
}

void WriteParameters(torch::nn::Module& module, const std::string& path) {
  WriteValues(module.parameters(), path);
}

// Every micro-batch the loop draws, in order (for a front end that cannot draw torch's numbers).
void WriteInputs(const std::string& path) {
  std::vector<torch::Tensor> batches;
  for (int step = 0; step < kSteps; ++step) {
    for (int micro = 0; micro < 2; ++micro) batches.push_back(Inputs(step, micro));
  }
  WriteValues(batches, path);
}

// The loop in one process on the whole batches (what the ranks' loop must equal).
struct Alone {
  Alone() {
    norms = TrainLoop(
        optimizer, [&](const torch::Tensor& x) { return model->forward(x); },
        [](bool) { return 0; },
        [&] { return torch::nn::utils::clip_grad_norm_(model->parameters(), kMaxNorm); }, 0, 16);
  }
  // "max_diff=D norm_diff=N clipped=C" of `trained` and its clipped `trained_norms` against these.
  std::string Compare(torch::nn::Module& trained, const std::vector<double>& trained_norms) {
    double norm_diff = 0;
    int clipped = 0;
    for (size_t i = 0; i < trained_norms.size(); ++i) {
      norm_diff = std::max(norm_diff, std::abs(trained_norms[i] - norms[i]) / norms[i]);
      clipped += trained_norms[i] > kMaxNorm ? 1 : 0;
    }
    return absl::StrFormat("max_diff=%.3g norm_diff=%.3g clipped=%d", MaxDiff(trained, *model),
                           norm_diff, clipped);
  }

  torch::nn::Sequential model = MakeModel();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  std::vector<double> norms;
};

std::string Train(ddpspawn::Fabric& fabric) {
  auto model = fabric.Setup(MakeModel());
  if (!g_dir.empty() && fabric.is_global_zero()) {
    WriteParameters(*model, g_dir + "/initial.txt");
    WriteInputs(g_dir + "/inputs.txt");
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const int64_t half = 16 / fabric.world_size();
  std::vector<double> norms = TrainLoop(
      optimizer, [&](const torch::Tensor& x) { return model(x); },
      [&](bool local) { return fabric.NoBackwardSync(model, local); },
      [&] { return fabric.ClipGradients(optimizer, kMaxNorm); }, fabric.global_rank() * half, half);
  if (!g_dir.empty()) fabric.Save(g_dir + "/final.ckpt", model, &optimizer, kSteps);
  const int64_t synced = model.ddp().ddp().reducer().synchronized_backwards();
  if (!fabric.is_global_zero()) return "";
  if (!g_dir.empty()) WriteParameters(*model, g_dir + "/weights.txt");
  Alone alone;
  return absl::StrFormat("%s synced=%d", alone.Compare(*model, norms), synced);
}

// The largest difference between the SGD momentum buffers of `a` and `b` (same parameter order).
double MomentumDiff(torch::optim::Optimizer& a, torch::optim::Optimizer& b) {
  double diff = 0;
  const auto pa = ddpspawn::AllParameters(a), pb = ddpspawn::AllParameters(b);
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto& sa =
        static_cast<const torch::optim::SGDParamState&>(*a.state().at(pa[i].unsafeGetTensorImpl()));
    const auto& sb =
        static_cast<const torch::optim::SGDParamState&>(*b.state().at(pb[i].unsafeGetTensorImpl()));
    diff = std::max(diff, (sa.momentum_buffer() - sb.momentum_buffer()).abs().max().item<double>());
  }
  return diff;
}

std::string TrainSharded(ddpspawn::Fabric& fabric) {
  auto model = fabric.Setup(MakeModel());
  std::unique_ptr<torch::optim::Optimizer> optimizer = fabric.SetupOptimizer(model, [&] {
    return std::make_unique<torch::optim::SGD>(model->parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  });
  const int64_t half = 16 / fabric.world_size();
  std::vector<double> norms = TrainLoop(
      *optimizer, [&](const torch::Tensor& x) { return model(x); },
      [&](bool local) { return fabric.NoBackwardSync(model, local); },
      [&] { return fabric.ClipGradients(*optimizer, kMaxNorm); }, fabric.global_rank() * half,
      half);
  int full_grads = 0;
  for (const torch::Tensor& p : model->parameters()) full_grads += p.grad().defined() ? 1 : 0;
  const auto* sharded = dynamic_cast<const ddpspawn::ShardedOptimizer*>(optimizer.get());
  const torch::Tensor elements = fabric.AllGather(
      torch::full({1}, sharded != nullptr ? sharded->shard_elements() : int64_t{-1}));
  const std::string path = g_dir + "/sharded.ckpt";
  fabric.Save(path, model, optimizer.get(), kSteps);
  torch::nn::Sequential loaded = MakeModel();
  torch::optim::SGD loaded_optimizer(loaded->parameters(),
                                     torch::optim::SGDOptions(0.1).momentum(0.9));
  fabric.Load(path, *loaded, &loaded_optimizer);
  if (!fabric.is_global_zero()) return "";
  Alone alone;
  return absl::StrFormat(
      "%s full_grads=%d shard_elements=%d,%d loaded_diff=%.3g momentum_diff=%.3g",
      alone.Compare(*model, norms), full_grads, elements[0].item<int64_t>(),
      elements[1].item<int64_t>(), MaxDiff(*loaded, *alone.model),
      MomentumDiff(loaded_optimizer, alone.optimizer));
}

std::string PlainUnderShardGradOp(ddpspawn::Fabric& fabric) {
  auto model = fabric.Setup(MakeModel());
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  fabric.Backward(model(Inputs(0, 0)).square().mean());
  optimizer.step();
  return "stepped";
}

std::string Collectives(ddpspawn::Fabric& fabric) {
  const torch::Tensor mine = torch::full({1}, static_cast<double>(fabric.global_rank()));
  const double mean = fabric.AllReduce(mine).item<double>();
  const double sum = fabric.AllReduce(mine, ddpspawn::ReduceOp::kSum).item<double>();
  const torch::Tensor gathered = fabric.AllGather(mine).flatten();
  const double from_1 = fabric.Broadcast(mine, /*src=*/1).item<double>();
  const std::string bytes = fabric.Broadcast(absl::StrFormat("rank%d", fabric.global_rank()), 1);
  fabric.Barrier("collectives");
  return absl::StrFormat("mean=%g sum=%g gathered=%g,%g from_rank_1=%g bytes=%s", mean, sum,
                         gathered[0].item<double>(), gathered[1].item<double>(), from_1, bytes);
}

std::string SaveLoad(ddpspawn::Fabric& fabric) {
  auto model = fabric.Setup(MakeModel());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 2; ++step) {
    optimizer.zero_grad();
    model(Inputs(step, fabric.global_rank())).square().mean().backward();
    optimizer.step();
  }
  const std::string path = g_dir + "/fabric.ckpt";
  fabric.Save(path, model, &optimizer, /*step=*/2);
  torch::nn::Sequential fresh =
      torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
  torch::optim::SGD fresh_optimizer(fresh->parameters(),
                                    torch::optim::SGDOptions(0.1).momentum(0.9));
  const int64_t step = fabric.Load(path, *fresh, &fresh_optimizer);
  double momentum_diff = 0;
  auto params = model->parameters();
  auto fresh_params = fresh->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& saved = static_cast<const torch::optim::SGDParamState&>(
        *optimizer.state().at(params[i].unsafeGetTensorImpl()));
    const auto& loaded = static_cast<const torch::optim::SGDParamState&>(
        *fresh_optimizer.state().at(fresh_params[i].unsafeGetTensorImpl()));
    momentum_diff =
        std::max(momentum_diff,
                 (saved.momentum_buffer() - loaded.momentum_buffer()).abs().max().item<double>());
  }
  return absl::StrFormat("step=%d max_diff=%g momentum_diff=%g", step, MaxDiff(*model, *fresh),
                         momentum_diff);
}

std::string Log(ddpspawn::Fabric& fabric) {
  for (int step = 0; step < 3; ++step) fabric.Log("value", fabric.global_rank() * 100 + step, step);
  return "logged";
}

std::string Autocast(ddpspawn::Fabric& fabric) {
  auto model = fabric.Setup(MakeModel());
  return std::string("dtype=") +
         std::string(c10::toString(model(torch::ones({2, 4})).scalar_type()));
}

std::string NanOnRank1(ddpspawn::Fabric& fabric) {
  auto model = fabric.Setup(MakeModel());
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  model(Inputs(0, 0)).square().mean().backward();
  if (fabric.global_rank() == 1) {
    model->parameters()[0].mutable_grad().fill_(std::numeric_limits<double>::quiet_NaN());
  }
  fabric.ClipGradients(optimizer, 1.0);
  return "clipped";
}

std::string Work(ddpspawn::Fabric& fabric) {
  if (g_mode == "train") return Train(fabric);
  if (g_mode == "collectives") return Collectives(fabric);
  if (g_mode == "save_load") return SaveLoad(fabric);
  if (g_mode == "log") return Log(fabric);
  if (g_mode == "autocast") return Autocast(fabric);
  if (g_mode == "nan_on_rank_1") return NanOnRank1(fabric);
  if (g_mode == "shard_grad_op" || g_mode == "zero1") return TrainSharded(fabric);
  if (g_mode == "plain_under_shard_grad_op") return PlainUnderShardGradOp(fabric);
  throw std::invalid_argument("unknown mode " + g_mode);
}

}  // namespace

int main(int argc, char** argv) {
  g_mode = argc > 1 ? argv[1] : "";
  g_dir = argc > 2 ? argv[2] : "";
  ddpspawn::FabricOptions options;
  options.devices = 2;
  options.strategy.start_method = ddpspawn::StartMethod::kFork;
  options.log_dir = g_dir;
  if (g_mode == "autocast") options.precision = ddpspawn::Precision::kBf16Mixed;
  if (g_mode == "shard_grad_op" || g_mode == "plain_under_shard_grad_op") {
    options.strategy.sharding_strategy = ddpspawn::ShardingStrategy::kShardGradOp;
  }
  options.zero_redundancy_optimizer = g_mode == "zero1";
  ddpspawn::Fabric fabric(options);
  absl::StatusOr<std::string> result = fabric.Launch(Work);
  if (!result.ok()) {
    std::printf("failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("result: %s\n", result->c_str());
  return 0;
}
