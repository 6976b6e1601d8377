// The worker the DDP tests launch. Each rank trains a DDP replica on its shard of every global
// batch; rank 0 also trains a single-process reference on the whole batch (N*b) from the same
// initial weights, and checks that both reach the same parameters, and that every rank holds rank
// 0's parameters and buffers (its own buffers with --no-broadcast-buffers). With a comm hook it
// also checks what the hook did to the first step's gradients (see CheckFirstStep), and with
// --expect-sent=N that PowerSGD sent N elements per step once compressing. Usage:
//   ddp_worker MODEL [--steps=N] [--batch=B] [--view] [--cap-mb=X]
//              [--first-cap-mb=X] [--find-unused] [--static-graph]
//              [--no-broadcast-buffers]
//              [--accum=K [--sync-every-backward-on=R]] [--hook=NAME] [--wrap=fp16|bf16]
//              [--powersgd-rank=R]
//              [--powersgd-start=S] [--min-compression=X] [--expect-sent=N]
//              [--tol=X] [--expect-diverge] [--uneven [--divide-by-active]]
// MODEL: mlp | cnn_bn | cnn_sync_bn | unused | static_unused | buckets. The result (rank 0) is
// "max_diff=<x> buckets=<n>", then what the first-step check measured, if it ran.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/sync_batch_norm.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"
#include "tests/testing/worker_checks.h"

namespace ddpspawn {

const char test_worker::kWorkerName[] = "ddp_worker";

namespace {

struct Flags {
  std::string model;
  std::map<std::string, std::string> values;
  bool Has(const std::string& name) const { return values.count(name) > 0; }
  double Number(const std::string& name, double fallback) const {
    double v = fallback;
    auto it = values.find(name);
    if (it != values.end() && !absl::SimpleAtod(it->second, &v)) v = fallback;
    return v;
  }
  std::string Text(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? "" : it->second;
  }
};

using test_worker::CheckOk;
using test_worker::Fail;
using test_worker::JoinGlooGroup;

// A model with a head that only some ranks use in some steps, and one no rank ever uses.
struct TwoHeadImpl : torch::nn::Module {
  TwoHeadImpl()
      : body(register_module("body", torch::nn::Linear(8, 16))),
        a(register_module("a", torch::nn::Linear(16, 4))),
        b(register_module("b", torch::nn::Linear(16, 4))),
        never(register_module("never", torch::nn::Linear(16, 4))) {}
  torch::Tensor forward(const torch::Tensor& x, bool use_b) {
    torch::Tensor h = torch::relu(body->forward(x));
    torch::Tensor out = a->forward(h);
    return use_b ? out + b->forward(h) : out;
  }
  torch::nn::Linear body, a, b, never;
};
TORCH_MODULE(TwoHead);

// Many small parameters and one larger than any bucket cap the tests use.
struct ManyParamsImpl : torch::nn::Module {
  ManyParamsImpl() {
    for (int i = 0; i < 40; ++i) {
      small.push_back(register_parameter(absl::StrCat("small", i), torch::randn({8}) * 0.1));
    }
    large = register_parameter("large", torch::randn({8, 8192}) * 0.01);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // Each small parameter gets a gradient tensor of its own (a stacked or summed use would make
    // LibTorch alias their gradients).
    torch::Tensor h = x;
    for (size_t i = 0; i < small.size(); ++i) h = h + small[i] * static_cast<double>(i + 1);
    return h.mm(large).narrow(1, 0, 4) * 0.1;
  }
  std::vector<torch::Tensor> small;
  torch::Tensor large;
};
TORCH_MODULE(ManyParams);

struct Model {
  std::shared_ptr<torch::nn::Module> module;
  // Forward for the sample block of `rank` at `step` (the reference passes each block's rank).
  std::function<torch::Tensor(const torch::Tensor&, int step, int rank)> forward;
  std::vector<int64_t> input_shape;
  // The reference runs each step's whole batch in one forward (SyncBatchNorm: statistics over every
  // rank's samples), not one forward per rank's block.
  bool whole_batch = false;
};

Model MakeModel(const std::string& name) {
  if (name == "mlp") {
    auto net = torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(),
                                     torch::nn::Linear(32, 32), torch::nn::Tanh(),
                                     torch::nn::Linear(32, 4));
    return {net.ptr(),
            [net](const torch::Tensor& x, int, int) mutable { return net->forward(x); },
            {8}};
  }
  if (name == "cnn_bn") {
    auto net = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                                     torch::nn::BatchNorm2d(4), torch::nn::ReLU(),
                                     torch::nn::Flatten(), torch::nn::Linear(4 * 4 * 4, 4));
    return {net.ptr(),
            [net](const torch::Tensor& x, int, int) mutable { return net->forward(x); },
            {1, 6, 6}};
  }
  if (name == "cnn_sync_bn") {
    auto net = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                                     torch::nn::BatchNorm2d(4), torch::nn::ReLU(),
                                     torch::nn::Flatten(), torch::nn::Linear(4 * 4 * 4, 4));
    absl::StatusOr<int> converted = ConvertSyncBatchNorm(net.ptr());
    CheckOk(converted.status(), "convert");
    if (*converted != 1) Fail(absl::StrCat("converted ", *converted, " BatchNorm layers, not 1"));
    return {net.ptr(),
            [net](const torch::Tensor& x, int, int) mutable { return net->forward(x); },
            {1, 6, 6},
            /*whole_batch=*/true};
  }
  if (name == "unused") {
    TwoHead net;
    // Head b: only rank 1's block uses it, only on odd steps.
    return {net.ptr(),
            [net](const torch::Tensor& x, int step, int rank) mutable {
              return net->forward(x, step % 2 == 1 && rank == 1);
            },
            {8}};
  }
  if (name == "static_unused") {
    TwoHead net;
    // The same parameters every step: head b and never stay unused.
    return {net.ptr(),
            [net](const torch::Tensor& x, int, int) mutable { return net->forward(x, false); },
            {8}};
  }
  if (name == "buckets") {
    ManyParams net;
    return {net.ptr(),
            [net](const torch::Tensor& x, int, int) mutable { return net->forward(x); },
            {8}};
  }
  Fail("unknown model " + name);
}

torch::Tensor Flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> parts;
  parts.reserve(tensors.size());
  for (const torch::Tensor& t : tensors)
    parts.push_back(t.detach().reshape({-1}).to(torch::kDouble));
  return parts.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(parts);
}

// `powersgd` receives PowerSGD's state when the hook is (or wraps) PowerSGD.
absl::StatusOr<std::shared_ptr<CommHook>> MakeHook(const Flags& flags,
                                                   std::shared_ptr<PowerSgdState>* powersgd) {
  std::string name = flags.Text("hook");
  std::shared_ptr<CommHook> hook;
  if (name == "powersgd") {
    auto state = std::make_shared<PowerSgdState>();
    *powersgd = state;
    state->options.matrix_approximation_rank = static_cast<int>(flags.Number("powersgd-rank", 1));
    state->options.start_iteration = static_cast<int64_t>(flags.Number("powersgd-start", 2));
    state->options.min_compression_rate = flags.Number("min-compression", 2.0);
    hook = MakePowerSgdHook(state);
  } else {
    absl::StatusOr<CommHookKind> kind = ParseCommHook(name);
    if (!kind.ok()) return kind.status();
    absl::StatusOr<std::shared_ptr<CommHook>> named = MakeCommHook(*kind);
    if (!named.ok()) return named.status();
    hook = *named;
  }
  std::string wrap = flags.Text("wrap");
  if (!wrap.empty()) return MakeCompressWrapper(wrap == "fp16" ? at::kHalf : at::kBFloat16, hook);
  return hook;
}

// Each parameter's gradient, as a double tensor (zeros where it has none).
std::vector<torch::Tensor> Gradients(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : module.parameters()) {
    out.push_back(p.grad().defined() ? p.grad().detach().to(torch::kDouble).clone()
                                     : torch::zeros(p.sizes(), torch::kDouble));
  }
  return out;
}

// The dtype that the hook rounds every gradient to on its way between ranks, if any.
std::optional<at::ScalarType> RoundingDtype(const Flags& flags) {
  for (const char* name : {"hook", "wrap"}) {
    if (flags.Text(name) == "fp16") return at::kHalf;
    if (flags.Text(name) == "bf16") return at::kBFloat16;
  }
  return std::nullopt;
}

// How far, per element, a mean of `world` shares that went through `dtype` may be from the exact
// mean. Each share is rounded once to the dtype and each partial sum (or the final mean) once more:
// at most 2*world roundings of values no larger than `abs_sum` (the sum of the shares' magnitudes),
// each off by at most u*|value| (u: half an ulp), or half the smallest subnormal step below the
// normal range. The fp32 reference adds up to 2*world fp32 roundings of its own.
torch::Tensor RoundingBound(at::ScalarType dtype, int world, const torch::Tensor& abs_sum) {
  double u = std::ldexp(1.0, -24), half_subnormal = std::ldexp(1.0, -150);  // float32
  if (dtype == at::kHalf) {
    u = std::ldexp(1.0, -11);
    half_subnormal = std::ldexp(1.0, -25);
  } else if (dtype == at::kBFloat16) {
    u = std::ldexp(1.0, -8);
    half_subnormal = std::ldexp(1.0, -134);
  }
  return abs_sum * (2.0 * world * (u + std::ldexp(1.0, -24))) + 2.0 * world * half_subnormal;
}

// The largest ratio |a - b| / bound over elements; fails if one exceeds 1.
double CheckWithin(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bound,
                   const std::string& what) {
  const double ratio = ((a - b).abs() / bound).max().item<double>();
  if (!(ratio <= 1.0)) {
    Fail(absl::StrCat(what, ": an element is ", ratio, "x its rounding bound from the exact mean"));
  }
  return ratio;
}

// Tolerances for PowerSGD's result at step 0 (CheckFirstStep), about 4x what rank-1 PowerSGD showed
// at 2 and 4 ranks: its second singular value was at most 1.8e-8 of its first, and <result, mean -
// result> at most 2.5e-7 of |mean|^2.
constexpr double kRankRatioTolerance = 8e-8;
constexpr double kOrthogonalityTolerance = 1e-6;

// At step 0 the reference's gradient on rank 0 is the exact mean of the ranks' gradients (the same
// weights, the same samples), so what the hook did to it shows: `ddp` are DDP's averaged gradients,
// `exact` the reference's, `abs_sum` the sum over ranks of the magnitude of each rank's share.
// Checks:
// - fp16/bf16 (or a wrapper): every averaged element is a value of that dtype (it went through it),
//   some differ from the exact mean, and each is within RoundingBound of it;
// - PowerSGD compressing from step 0: each matrix it compresses (rank r below the matrix's) comes
//   back with rank r, as the orthogonal projection of the exact mean onto r columns (so it is off
//   by at least the best rank-r approximation's error, Eckart-Young, and at most by the mean's
//   norm); what it sends dense comes back within fp32 rounding.
// Returns what it measured, for the job's result.
std::string CheckFirstStep(const Flags& flags, int world, const std::vector<torch::Tensor>& ddp,
                           const std::vector<torch::Tensor>& exact,
                           const std::vector<torch::Tensor>& abs_sum) {
  if (std::optional<at::ScalarType> dtype = RoundingDtype(flags)) {
    const char* name = *dtype == at::kHalf ? "float16" : "bfloat16";
    torch::Tensor got = Flatten(ddp), want = Flatten(exact);
    if (!got.to(torch::kFloat).to(*dtype).to(torch::kDouble).equal(got)) {
      Fail(absl::StrCat("the averaged gradients hold values that are not ", name,
                        ": the hook did not round them"));
    }
    const int64_t changed = got.ne(want.to(torch::kFloat).to(torch::kDouble)).sum().item<int64_t>();
    if (changed == 0) {
      Fail("the averaged gradients are the exact mean: the hook compressed nothing");
    }
    const double ratio =
        CheckWithin(got, want, RoundingBound(*dtype, world, Flatten(abs_sum)), "first step");
    return absl::StrCat(" first_step: max_abs_diff=", (got - want).abs().max().item<double>(),
                        " of_bound=", ratio, " changed=", changed, "/", got.numel());
  }
  if (flags.Text("hook") != "powersgd" || flags.Number("powersgd-start", 2) != 0) return "";
  const int64_t approximation_rank = static_cast<int64_t>(flags.Number("powersgd-rank", 1));
  const double min_rate = flags.Number("min-compression", 2.0);
  double worst_rank_ratio = 0, worst_orthogonality = 0, worst_dense = 0;
  std::vector<std::string> errors;
  for (size_t i = 0; i < ddp.size(); ++i) {
    const int64_t rows = ddp[i].dim() > 1 ? ddp[i].size(0) : 0;
    const int64_t cols = rows > 0 ? ddp[i].numel() / rows : 0;
    const int64_t r = std::min({approximation_rank, rows, cols});
    const bool compressed = r > 0 && r < std::min(rows, cols) &&
                            static_cast<double>(rows * cols) / ((rows + cols) * r) >= min_rate;
    if (!compressed) {
      worst_dense = std::max(
          worst_dense, CheckWithin(ddp[i], exact[i], RoundingBound(at::kFloat, world, abs_sum[i]),
                                   absl::StrCat("first step, dense parameter ", i)));
      continue;
    }
    torch::Tensor got = ddp[i].view({rows, cols}), mean = exact[i].view({rows, cols});
    torch::Tensor mean_sv = at::linalg_svdvals(mean), got_sv = at::linalg_svdvals(got);
    const double norm = mean.norm().item<double>();
    const double best = mean_sv.narrow(0, r, mean_sv.size(0) - r).norm().item<double>();
    const double error = (got - mean).norm().item<double>();
    // The result's (r+1)-th singular value against its first: 0 at rank r.
    const double rank_ratio = (got_sv[r] / got_sv[0]).item<double>();
    // A projection is orthogonal to what it leaves out: <got, mean - got> = 0.
    const double orthogonality =
        std::abs((got * (mean - got)).sum().item<double>()) / (norm * norm);
    worst_rank_ratio = std::max(worst_rank_ratio, rank_ratio);
    worst_orthogonality = std::max(worst_orthogonality, orthogonality);
    errors.push_back(absl::StrCat(error / norm, "(best ", best / norm, ")"));
    if (!(rank_ratio <= kRankRatioTolerance)) {
      Fail(absl::StrCat("first step, parameter ", i, ": the result does not have rank ", r,
                        " (singular value ", r + 1, " is ", rank_ratio, " of the first)"));
    }
    if (!(orthogonality <= kOrthogonalityTolerance)) {
      Fail(absl::StrCat("first step, parameter ", i,
                        ": the result is not a projection of the exact mean (<result, "
                        "mean - result> is ",
                        orthogonality, " of |mean|^2)"));
    }
    if (!(error >= best * (1 - kOrthogonalityTolerance) && error <= norm)) {
      Fail(absl::StrCat("first step, parameter ", i, ": off the exact mean by ", error / norm,
                        " of its norm, outside [", best / norm, ", 1]"));
    }
  }
  return absl::StrCat(" first_step: relative_errors=", absl::StrJoin(errors, ","),
                      " rank_ratio=", worst_rank_ratio, " orthogonality=", worst_orthogonality,
                      " dense_of_bound=", worst_dense);
}

// The bound on DDP's difference from the single-process reference for the cases without a lossy
// hook or SyncBatchNorm: they differ only by the order of float32 additions, observed 0 or 1.49e-8
// on 2 and 4 ranks (ddp_test's output), so a few ulps; a lossy change (fp16's error is 1.5e-5)
// fails it.
constexpr double kDefaultTolerance = 1e-7;

// Uneven inputs: rank r has 3 + 2 * (r % 2) batches (3 and 5 with 2 ranks) of the `steps` (5)
// generated, and trains through ActiveRanks and ShadowIteration. The reference trains on each
// step's batches of the ranks that have one, averaged over every rank (--divide-by-active: over
// those ranks), as DDP promises; afterwards every rank must hold its parameters.
template <typename Block>
int RunUneven(const Flags& flags, ProcessGroup& group, DistributedDataParallel& ddp, Model& model,
              Model& reference, torch::optim::Optimizer& optimizer,
              torch::optim::Optimizer& reference_optimizer, const torch::Tensor& inputs,
              const torch::Tensor& targets, const Block& block) {
  const int rank = group.rank(), world = group.world_size();
  auto batches_of = [](int r) { return 3 + 2 * (r % 2); };
  int iterations = 0;
  for (int step = 0;; ++step) {
    absl::StatusOr<int> active = ddp.ActiveRanks(step < batches_of(rank));
    CheckOk(active.status(), "active ranks");
    if (*active == 0) break;
    int expected_active = 0;
    for (int r = 0; r < world; ++r) expected_active += step < batches_of(r) ? 1 : 0;
    if (*active != expected_active) {
      Fail(absl::StrCat("step ", step, ": ", *active, " active ranks, not ", expected_active));
    }
    if (step < batches_of(rank)) {
      optimizer.zero_grad(/*set_to_none=*/false);
      CheckOk(ddp.PrepareForward(), "prepare forward");
      torch::Tensor out = model.forward(block(inputs, step, 0, rank), step, rank);
      try {
        torch::mse_loss(out, block(targets, step, 0, rank)).backward();
      } catch (const std::exception& e) {
        Fail(absl::StrCat("backward: ", e.what()));
      }
      optimizer.step();
      ++iterations;
    } else {
      CheckOk(ddp.ShadowIteration(), "shadow iteration");
    }
    if (rank == 0) {
      reference_optimizer.zero_grad(/*set_to_none=*/false);
      const double divisor = flags.Has("divide-by-active") ? expected_active : world;
      for (int r = 0; r < world; ++r) {
        if (step >= batches_of(r)) continue;
        torch::Tensor out = reference.forward(block(inputs, step, 0, r), step, r);
        (torch::mse_loss(out, block(targets, step, 0, r)) / divisor).backward();
      }
      reference_optimizer.step();
    }
  }
  if (iterations != batches_of(rank)) Fail("a rank trained the wrong number of iterations");
  torch::Tensor mine = Flatten(model.module->parameters());
  torch::Tensor rank0 = mine.clone();
  CheckOk(group.Broadcast(rank0, 0), "broadcast");
  if (!mine.equal(rank0)) Fail(absl::StrCat("rank ", rank, " ended with other parameters"));
  if (rank == 0) {
    const double diff = (mine - Flatten(reference.module->parameters())).abs().max().item<double>();
    const double tol = flags.Number("tol", kDefaultTolerance);
    if (!(diff <= tol)) {
      Fail(absl::StrCat("DDP and the single-process reference differ by ", diff, " > ", tol));
    }
    CheckOk(
        SetWorkerResult(absl::StrCat("max_diff=", diff, " buckets=", ddp.reducer().bucket_count())),
        "result");
  }
  return 0;
}

// The /dev/shm segments this process has mapped: the distinct inodes of its /dev/shm mappings (each
// segment is unlinked once every rank mapped it: "/dev/shm/NAME (deleted)").
size_t SharedMemorySegments() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> inodes;
  for (std::string line; std::getline(maps, line);) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() >= 6 && absl::StartsWith(fields[5], "/dev/shm/")) inodes.insert(fields[4]);
  }
  return inodes.size();
}

int Run(const Flags& flags) {
  const std::unique_ptr<ProcessGroup> joined = JoinGlooGroup();
  ProcessGroup& group = *joined;
  const int rank = group.rank(), world = group.world_size();
  const int steps = static_cast<int>(flags.Number("steps", 5));
  const int batch = static_cast<int>(flags.Number("batch", 4));
  const int accum = static_cast<int>(flags.Number("accum", 1));
  const double tol = flags.Number("tol", kDefaultTolerance);
  torch::set_num_threads(1);

  // Each rank builds its replica from a different seed: DDP must make them identical.
  torch::manual_seed(100 + rank);
  Model model = MakeModel(flags.model);
  torch::manual_seed(100);
  Model reference = MakeModel(flags.model);  // rank 0's initial weights

  DdpOptions options;
  options.reducer.gradient_as_bucket_view = flags.Has("view");
  options.reducer.find_unused_parameters = flags.Has("find-unused");
  options.reducer.static_graph = flags.Has("static-graph");
  options.reducer.bucket_cap_mb = flags.Number("cap-mb", 25.0);
  options.reducer.first_bucket_cap_mb = flags.Number("first-cap-mb", 1.0);
  options.broadcast_buffers = !flags.Has("no-broadcast-buffers");
  options.divide_by_initial_world_size = !flags.Has("divide-by-active");
  std::shared_ptr<PowerSgdState> powersgd;
  absl::StatusOr<std::shared_ptr<CommHook>> hook = MakeHook(flags, &powersgd);
  CheckOk(hook.status(), "hook");
  options.reducer.comm_hook = *hook;
  const size_t segments_before = SharedMemorySegments();
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> wrapped =
      DistributedDataParallel::Wrap(model.module, &group, options);
  CheckOk(wrapped.status(), "wrap");
  DistributedDataParallel& ddp = **wrapped;
  // Each bucket in a /dev/shm segment of its own (summed in place) when the group sums in shared
  // memory, none under DDPSPAWN_SHM_ALLREDUCE=0: NewReductionBuffer falls back to ordinary memory
  // without a word, and the sums come out the same.
  const char* shm_setting = std::getenv("DDPSPAWN_SHM_ALLREDUCE");
  const bool gloo_only = shm_setting != nullptr && std::string(shm_setting) == "0";
  const size_t shm_buckets = SharedMemorySegments() - segments_before;
  const size_t expected_shm_buckets = gloo_only ? 0 : ddp.reducer().bucket_count();
  if (group.uses_shared_memory() == gloo_only || shm_buckets != expected_shm_buckets) {
    Fail(absl::StrCat(shm_buckets, " of the ", ddp.reducer().bucket_count(),
                      " buckets are in shared memory, not ", expected_shm_buckets, " (the group ",
                      group.uses_shared_memory() ? "sums" : "does not sum",
                      " in shared memory; DDPSPAWN_SHM_ALLREDUCE=", shm_setting ? shm_setting : "",
                      ")"));
  }

  torch::optim::SGD optimizer(model.module->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD reference_optimizer(reference.module->parameters(),
                                        torch::optim::SGDOptions(0.05).momentum(0.9));

  // The same data on every rank: step s, micro-batch m, rank r owns block [r*b, (r+1)*b).
  torch::manual_seed(7);
  std::vector<int64_t> shape = {steps, accum, static_cast<int64_t>(world) * batch};
  shape.insert(shape.end(), model.input_shape.begin(), model.input_shape.end());
  torch::Tensor inputs = torch::randn(shape);
  // Targets from a fixed random teacher, so there is something to learn.
  const int64_t features = inputs[0][0][0].numel();
  torch::Tensor teacher = torch::randn({features, 4}) / std::sqrt(static_cast<double>(features));
  torch::Tensor targets =
      torch::tanh(inputs.reshape({steps, accum, static_cast<int64_t>(world) * batch, features})
                      .matmul(teacher));
  auto block = [&](const torch::Tensor& all, int step, int micro, int r) {
    return all[step][micro].narrow(0, static_cast<int64_t>(r) * batch, batch);
  };

  if (flags.Has("uneven")) {
    return RunUneven(flags, group, ddp, model, reference, optimizer, reference_optimizer, inputs,
                     targets, block);
  }

  const bool check_first_step = !flags.Text("hook").empty() && rank == 0;
  std::vector<torch::Tensor> first_ddp, first_exact, first_abs_sum;
  std::string first_step_result;
  int64_t dense_elements = 0;
  for (const torch::Tensor& p : model.module->parameters()) dense_elements += p.numel();

  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    // Gradients are zeroed, not set to None (LibTorch 2.x's default): without
    // find_unused_parameters a parameter that no rank used in a step gets a zero gradient from DDP,
    // where the reference would have none, and SGD's momentum treats the two differently.
    // (docs/ddp.md)
    optimizer.zero_grad(/*set_to_none=*/false);
    double step_loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      CheckOk(ddp.PrepareForward(), "prepare forward");
      torch::Tensor out = model.forward(block(inputs, step, micro, rank), step, rank);
      torch::Tensor loss = torch::mse_loss(out, block(targets, step, micro, rank)) / accum;
      step_loss += loss.item<double>();
      try {  // the reducer's errors surface from backward()
        // --sync-every-backward-on=R: rank R never enters no_sync (a loop's bug, to be refused).
        const bool skips_no_sync = flags.Number("sync-every-backward-on", -1) == rank;
        if (micro + 1 < accum && !skips_no_sync) {
          DistributedDataParallel::NoSync no_sync = ddp.no_sync();
          loss.backward();
        } else {
          loss.backward();
        }
      } catch (const std::exception& e) {
        Fail(absl::StrCat("backward: ", e.what()));
      }
    }
    losses.push_back(step_loss);
    if (step == 0 && check_first_step) first_ddp = Gradients(*model.module);
    if (std::optional<at::ScalarType> dtype = RoundingDtype(flags)) {
      torch::Tensor grads = Flatten(Gradients(*model.module));
      if (!grads.to(torch::kFloat).to(*dtype).to(torch::kDouble).equal(grads)) {
        Fail(absl::StrCat("step ", step, ": rank ", rank, "'s averaged gradients hold values that ",
                          "the hook's dtype cannot: it did not round them"));
      }
    }
    if (powersgd != nullptr && flags.Has("expect-sent") &&
        step >= powersgd->options.start_iteration) {
      const int64_t expected = static_cast<int64_t>(flags.Number("expect-sent", -1));
      if (powersgd->last_dense_elements != dense_elements ||
          powersgd->last_sent_elements != expected) {
        Fail(absl::StrCat("step ", step, ": PowerSGD sent ", powersgd->last_sent_elements,
                          " elements for a dense size of ", powersgd->last_dense_elements,
                          "; expected ", expected, " of ", dense_elements));
      }
    }
    optimizer.step();
    std::vector<int> log = ddp.reducer().TakeLaunchLog();
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i] != static_cast<int>(i)) Fail("buckets did not start in bucket order");
    }
    if (log.size() != ddp.reducer().bucket_count()) Fail("not every bucket was started");
    if (options.reducer.gradient_as_bucket_view) {  // no copy: a bucket's
                                                    // gradients share storage
      std::vector<torch::Tensor> trainable = model.module->parameters();
      for (size_t b = 0; b < ddp.reducer().bucket_count(); ++b) {
        const std::vector<size_t>& members = ddp.reducer().bucket_members(b);
        torch::Tensor first;  // the bucket's first defined gradient
        for (size_t i : members) {
          const torch::Tensor& grad = trainable[i].grad();
          if (!grad.defined()) continue;  // a parameter no rank has used yet
          if (!first.defined()) first = grad;
          if (!grad.storage().is_alias_of(first.storage())) {
            Fail("with gradient_as_bucket_view, a gradient is not a view into its bucket");
          }
        }
      }
    }

    if (rank == 0) {  // the single-process reference over all N*b samples of the step
      reference_optimizer.zero_grad(/*set_to_none=*/false);
      std::vector<torch::Tensor> buffers_after_block0;
      std::vector<torch::Tensor> before;  // step 0: the gradients before this block's share
      if (step == 0 && check_first_step) {
        first_exact = Gradients(*reference.module);
        for (const torch::Tensor& g : first_exact) first_abs_sum.push_back(torch::zeros_like(g));
      }
      for (int micro = 0; micro < accum; ++micro) {
        for (int r = 0; r < world; ++r) {
          if (reference.whole_batch && r > 0) break;
          // The mean over the whole batch is the mean of the blocks' means.
          torch::Tensor out = reference.whole_batch
                                  ? reference.forward(inputs[step][micro], step, 0)
                                  : reference.forward(block(inputs, step, micro, r), step, r);
          torch::Tensor target =
              reference.whole_batch ? targets[step][micro] : block(targets, step, micro, r);
          (torch::mse_loss(out, target) / (accum * (reference.whole_batch ? 1 : world))).backward();
          if (step == 0 && check_first_step) {
            std::vector<torch::Tensor> after = Gradients(*reference.module);
            for (size_t i = 0; i < after.size(); ++i) {
              first_abs_sum[i] += (after[i] - first_exact[i]).abs();
            }
            first_exact = std::move(after);
          }
          if (micro == accum - 1 && r == 0) {  // DDP keeps rank 0's buffers after each forward
            for (const torch::Tensor& b : reference.module->buffers()) {
              buffers_after_block0.push_back(b.clone());
            }
          }
        }
      }
      if (options.broadcast_buffers && !reference.whole_batch) {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> buffers = reference.module->buffers();
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(buffers_after_block0[i]);
      }
      reference_optimizer.step();
      if (step == 0 && check_first_step) {
        first_step_result = CheckFirstStep(flags, world, first_ddp, first_exact, first_abs_sum);
      }
    }
  }

  // Every rank must hold rank 0's parameters (bit for bit) and, with broadcast_buffers after a
  // final PrepareForward, rank 0's buffers; without it, buffers of its own (running statistics of
  // other data).
  CheckOk(ddp.PrepareForward(), "prepare forward");
  for (const auto& [what, tensors] : {std::make_pair("parameters", model.module->parameters()),
                                      std::make_pair("buffers", model.module->buffers())}) {
    torch::Tensor mine = Flatten(tensors);
    torch::Tensor rank0 = mine.clone();
    CheckOk(group.Broadcast(rank0, 0), "broadcast");
    const bool shared = std::string(what) == "parameters" || options.broadcast_buffers;
    if (shared && !mine.equal(rank0)) {
      Fail(absl::StrCat("rank ", rank, "'s ", what, " differ from rank 0's by ",
                        (mine - rank0).abs().max().item<double>()));
    }
    if (!shared && rank != 0 && mine.numel() > 0 && mine.equal(rank0)) {
      Fail(
          absl::StrCat("rank ", rank, "'s buffers are rank 0's although broadcast_buffers is off"));
    }
  }
  if ((options.reducer.find_unused_parameters || options.reducer.static_graph) &&
      (flags.model == "unused" || flags.model == "static_unused")) {
    // A copy: named_parameters() returns a temporary dictionary (ASan found the dangling
    // reference).
    const at::Tensor never = model.module->named_parameters()["never.weight"];
    if (never.grad().defined()) Fail("the parameter no rank used got a gradient");
  }
  if (rank == 0) {
    double diff = (Flatten(model.module->parameters()) - Flatten(reference.module->parameters()))
                      .abs()
                      .max()
                      .item<double>();
    std::printf("max |ddp - reference| = %.3g, losses: %s\n", diff,
                absl::StrJoin(losses, " ").c_str());
    if (flags.Has("expect-diverge")) {
      // Lossy compression: the parameters may drift from the reference, but training must work.
      const size_t k = std::max<size_t>(1, losses.size() / 4);
      double first = 0, last = 0;
      for (size_t i = 0; i < k; ++i) {
        first += losses[i];
        last += losses[losses.size() - 1 - i];
      }
      if (!(last < 0.8 * first)) {
        Fail(absl::StrCat("the loss did not fall: ", absl::StrJoin(losses, " ")));
      }
    } else if (!(diff <= tol)) {
      Fail(absl::StrCat("DDP and the single-process reference differ by ", diff, " > ", tol));
    }
    if (reference.whole_batch) {  // the running statistics too
      const double buffers_diff =
          (Flatten(model.module->buffers()) - Flatten(reference.module->buffers()))
              .abs()
              .max()
              .item<double>();
      if (!(buffers_diff <= tol)) {
        Fail(absl::StrCat("the running statistics differ from the reference's by ", buffers_diff,
                          " > ", tol));
      }
    }
    CheckOk(SetWorkerResult(absl::StrCat(
                "max_diff=", diff, " buckets=", ddp.reducer().bucket_count(), first_step_result)),
            "result");
  }
  return 0;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  // The flags of the usage above: any other argument (a misspelt flag) fails the run instead of
  // testing the defaults.
  static const std::set<std::string> kKnown = {"steps",
                                               "batch",
                                               "view",
                                               "cap-mb",
                                               "first-cap-mb",
                                               "find-unused",
                                               "static-graph",
                                               "no-broadcast-buffers",
                                               "accum",
                                               "sync-every-backward-on",
                                               "hook",
                                               "wrap",
                                               "powersgd-rank",
                                               "powersgd-start",
                                               "min-compression",
                                               "expect-sent",
                                               "tol",
                                               "expect-diverge",
                                               "uneven",
                                               "divide-by-active"};
  ddpspawn::Flags flags;
  flags.model = argc > 1 ? argv[1] : "";
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    const std::string name =
        absl::StartsWith(arg, "--")
            ? arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)
            : "";
    if (kKnown.count(name) == 0) {
      ddpspawn::Fail(absl::StrCat("unknown argument '", arg, "' (see the usage in ddp_worker.cc)"));
    }
    flags.values[name] = eq == std::string::npos ? "" : arg.substr(eq + 1);
  }
  return ddpspawn::Run(flags);
}
