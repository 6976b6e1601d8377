// The worker the DDP tests launch. Each rank trains a DDP replica on its shard
// of every global batch; rank 0 also trains a single-process reference on the
// whole batch (N*b) from the same initial weights, and checks that both reach
// the same parameters, and that every rank holds rank 0's parameters and
// buffers. Usage:
//   ddp_worker MODEL [--steps=N] [--batch=B] [--view] [--cap-mb=X]
//   [--first-cap-mb=X]
//              [--find-unused] [--no-broadcast-buffers] [--accum=K]
//              [--hook=NAME]
//              [--wrap=fp16|bf16] [--powersgd-rank=R] [--powersgd-start=S]
//              [--min-compression=X] [--tol=X] [--expect-diverge]
// MODEL: mlp | cnn_bn | unused | buckets. The result (rank 0) is "max_diff=<x>
// buckets=<n>".
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"

namespace ddpspawn {
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

[[noreturn]] void Fail(const std::string& why) {
  (void)SetWorkerError(why);
  std::fprintf(stderr, "ddp_worker: %s\n", why.c_str());
  std::exit(1);
}

void CheckOk(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Fail(absl::StrCat(what, ": ", status.ToString()));
}

// A model with a head that only some ranks use in some steps, and one no rank
// ever uses.
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
    // Each small parameter gets a gradient tensor of its own (a stacked or
    // summed use would make LibTorch alias their gradients).
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
  // Forward for the sample block of `rank` at `step` (the reference passes each
  // block's rank).
  std::function<torch::Tensor(const torch::Tensor&, int step, int rank)> forward;
  std::vector<int64_t> input_shape;
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
  if (name == "unused") {
    TwoHead net;
    // Head b: only rank 1's block uses it, only on odd steps.
    return {net.ptr(),
            [net](const torch::Tensor& x, int step, int rank) mutable {
              return net->forward(x, step % 2 == 1 && rank == 1);
            },
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

absl::StatusOr<std::shared_ptr<CommHook>> MakeHook(const Flags& flags) {
  std::string name = flags.Text("hook");
  std::shared_ptr<CommHook> hook;
  if (name == "powersgd") {
    auto state = std::make_shared<PowerSgdState>();
    state->options.matrix_approximation_rank = static_cast<int>(flags.Number("powersgd-rank", 1));
    state->options.start_iteration = static_cast<int64_t>(flags.Number("powersgd-start", 2));
    state->options.min_compression_rate = flags.Number("min-compression", 2.0);
    hook = MakePowerSgdHook(state);
  } else {
    absl::StatusOr<std::shared_ptr<CommHook>> named = MakeCommHookByName(name);
    if (!named.ok()) return named.status();
    hook = *named;
  }
  std::string wrap = flags.Text("wrap");
  if (!wrap.empty()) return MakeCompressWrapper(wrap == "fp16" ? at::kHalf : at::kBFloat16, hook);
  return hook;
}

int Run(const Flags& flags) {
  absl::StatusOr<ClusterInfo> cluster = DetectClusterEnvironment();
  CheckOk(cluster.status(), "cluster");
  absl::StatusOr<std::unique_ptr<ProcessGroup>> joined =
      ProcessGroup::Create(*cluster, {"gloo", absl::Seconds(60)});
  CheckOk(joined.status(), "join");
  ProcessGroup& group = **joined;
  const int rank = group.rank(), world = group.world_size();
  const int steps = static_cast<int>(flags.Number("steps", 5));
  const int batch = static_cast<int>(flags.Number("batch", 4));
  const int accum = static_cast<int>(flags.Number("accum", 1));
  const double tol = flags.Number("tol", 1e-5);
  torch::set_num_threads(1);

  // Each rank builds its replica from a different seed: DDP must make them
  // identical.
  torch::manual_seed(100 + rank);
  Model model = MakeModel(flags.model);
  torch::manual_seed(100);
  Model reference = MakeModel(flags.model);  // rank 0's initial weights

  DdpOptions options;
  options.reducer.gradient_as_bucket_view = flags.Has("view");
  options.reducer.find_unused_parameters = flags.Has("find-unused");
  options.reducer.bucket_cap_mb = flags.Number("cap-mb", 25.0);
  options.reducer.first_bucket_cap_mb = flags.Number("first-cap-mb", 1.0);
  options.broadcast_buffers = !flags.Has("no-broadcast-buffers");
  absl::StatusOr<std::shared_ptr<CommHook>> hook = MakeHook(flags);
  CheckOk(hook.status(), "hook");
  options.reducer.comm_hook = *hook;
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> wrapped =
      DistributedDataParallel::Wrap(model.module, &group, options);
  CheckOk(wrapped.status(), "wrap");
  DistributedDataParallel& ddp = **wrapped;

  torch::optim::SGD optimizer(model.module->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD reference_optimizer(reference.module->parameters(),
                                        torch::optim::SGDOptions(0.05).momentum(0.9));

  // The same data on every rank: step s, micro-batch m, rank r owns block [r*b,
  // (r+1)*b).
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

  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    // Gradients are zeroed, not set to None (LibTorch 2.x's default): without
    // find_unused_parameters a parameter that no rank used in a step gets a
    // zero gradient from DDP, where the reference would have none, and SGD's
    // momentum treats the two differently. (docs/ddp.md)
    optimizer.zero_grad(/*set_to_none=*/false);
    double step_loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      CheckOk(ddp.PrepareForward(), "prepare forward");
      torch::Tensor out = model.forward(block(inputs, step, micro, rank), step, rank);
      torch::Tensor loss = torch::mse_loss(out, block(targets, step, micro, rank)) / accum;
      step_loss += loss.item<double>();
      if (micro + 1 < accum) {
        DistributedDataParallel::NoSync no_sync = ddp.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    losses.push_back(step_loss);
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
      for (int micro = 0; micro < accum; ++micro) {
        for (int r = 0; r < world; ++r) {
          torch::Tensor out = reference.forward(block(inputs, step, micro, r), step, r);
          (torch::mse_loss(out, block(targets, step, micro, r)) / (accum * world)).backward();
          if (micro == accum - 1 && r == 0) {  // DDP keeps rank 0's buffers after each forward
            for (const torch::Tensor& b : reference.module->buffers()) {
              buffers_after_block0.push_back(b.clone());
            }
          }
        }
      }
      if (options.broadcast_buffers) {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> buffers = reference.module->buffers();
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(buffers_after_block0[i]);
      }
      reference_optimizer.step();
    }
  }

  // Every rank must hold rank 0's parameters (bit for bit) and, with
  // broadcast_buffers after a final PrepareForward, rank 0's buffers.
  CheckOk(ddp.PrepareForward(), "prepare forward");
  for (const auto& [what, tensors] :
       {std::make_pair("parameters", model.module->parameters()),
        std::make_pair("buffers", options.broadcast_buffers ? model.module->buffers()
                                                            : std::vector<torch::Tensor>{})}) {
    torch::Tensor mine = Flatten(tensors);
    torch::Tensor rank0 = mine.clone();
    CheckOk(group.Broadcast(rank0, 0), "broadcast");
    if (!mine.equal(rank0)) {
      Fail(absl::StrCat("rank ", rank, "'s ", what, " differ from rank 0's by ",
                        (mine - rank0).abs().max().item<double>()));
    }
  }
  if (options.reducer.find_unused_parameters && flags.model == "unused") {
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
      // Lossy compression: the parameters may drift from the reference, but
      // training must work.
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
    CheckOk(
        SetWorkerResult(absl::StrCat("max_diff=", diff, " buckets=", ddp.reducer().bucket_count())),
        "result");
  }
  return 0;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  ddpspawn::Flags flags;
  flags.model = argc > 1 ? argv[1] : "";
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) continue;
    size_t eq = arg.find('=');
    flags.values[arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "" : arg.substr(eq + 1);
  }
  return ddpspawn::Run(flags);
}
