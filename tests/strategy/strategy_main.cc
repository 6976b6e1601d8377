// A program that uses DDPSpawnStrategy as a user would: it launches itself as 2 ranks (start method
// from argv[1]: spawn or fork; precision from argv[2]) and, in each rank, exercises every part of
// the strategy's API against expected values. Prints rank 0's report and exits 0 when every check
// passed. Usage: strategy_main spawn|fork|forkserver 32-true|bf16-mixed|scaled-32 CHECKPOINT_DIR
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/ddp/sync_batch_norm.h"
#include "core/model/checkpoint.h"
#include "core/strategy/ddp_spawn_strategy.h"

namespace ddpspawn {
namespace {

// A regression MLP with every step of the module interface.
class Regressor : public NnModule {
 public:
  explicit Regressor(const torch::nn::Sequential& net = torch::nn::Sequential(
                         torch::nn::Linear(4, 16), torch::nn::ReLU(), torch::nn::Linear(16, 1)))
      : NnModule(net.ptr()), net_(net) {}
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, int64_t) override {
    at::Tensor out = net_->forward(batch[0]);
    last_output_dtype = out.scalar_type();
    return torch::mse_loss(out.to(at::kFloat), batch[1]);
  }
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch, int64_t) override {
    return StepMetrics{{"val_loss", torch::mse_loss(net_->forward(batch[0]), batch[1])}};
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch& batch, int64_t) override {
    return net_->forward(batch[0]);
  }
  at::ScalarType last_output_dtype = at::kFloat;

 private:
  torch::nn::Sequential net_;
};

#define EXPECT(cond)                                                                \
  do {                                                                              \
    if (!(cond)) return absl::InternalError(absl::StrCat("check failed: ", #cond)); \
  } while (0)
#define EXPECT_OK(expr)                                                                 \
  do {                                                                                  \
    const absl::Status& _s = (expr);                                                    \
    if (!_s.ok()) return absl::InternalError(absl::StrCat(#expr, ": ", _s.ToString())); \
  } while (0)

std::string g_checkpoint_dir;

at::Tensor Flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.detach().reshape({-1}));
  return torch::cat(flat);
}

// "scaled-32": full precision with a loss scaler (init 1024, grows after 5 good steps), so that
// DDPSpawnStrategy's Backward and OptimizerStep are checked with scaling on CPU, where "16-mixed"
// cannot run.
class ScaledFullPrecision : public PrecisionPlugin {
 public:
  std::string name() const override { return "scaled-32"; }
  std::unique_ptr<StepContext> ForwardContext(bool) override {
    return std::make_unique<StepContext>();
  }
  GradScaler* grad_scaler() override { return &scaler_; }

 private:
  GradScaler scaler_{GradScalerOptions{.init_scale = 1024.0, .growth_interval = 5}};
};

absl::StatusOr<std::string> Work(DDPSpawnStrategy& s) {
  const int rank = s.global_rank();
  // Properties.
  EXPECT(s.world_size() == 2 && s.num_processes() == 2 && s.num_nodes() == 1);
  EXPECT(rank == s.local_rank() && s.node_rank() == 0);
  EXPECT(s.is_global_zero() == (rank == 0));
  EXPECT(s.root_device().is_cpu() && s.process_group_backend() == Backend::kGloo);
  EXPECT(s.distributed_sampler_kwargs().num_replicas == 2);
  EXPECT(s.distributed_sampler_kwargs().rank == rank);
  // Collectives.
  EXPECT_OK(s.Barrier("start"));
  absl::StatusOr<std::string> message = s.Broadcast(rank == 1 ? "from rank 1" : "", 1);
  EXPECT(message.ok() && *message == "from rank 1");
  at::Tensor value = torch::full({3}, static_cast<float>(rank + 1));
  for (const auto& [op, want] : std::vector<std::pair<ReduceOp, float>>{{ReduceOp::kMean, 1.5f},
                                                                        {ReduceOp::kSum, 3.0f},
                                                                        {ReduceOp::kMin, 1.0f},
                                                                        {ReduceOp::kMax, 2.0f}}) {
    absl::StatusOr<at::Tensor> reduced = s.Reduce(value, op);
    EXPECT(reduced.ok() && reduced->eq(want).all().item<bool>());
  }
  EXPECT(value.eq(static_cast<float>(rank + 1)).all().item<bool>());  // a copy was reduced
  EXPECT(s.Reduce(42, ReduceOp::kSum) == 42);                         // non-tensors pass through
  EXPECT(s.Reduce(std::string("text")) == "text");
  absl::StatusOr<at::Tensor> gathered = s.AllGather(torch::full({2}, rank, at::kLong));
  EXPECT(gathered.ok() && gathered->sizes() == at::IntArrayRef({2, 2}));
  EXPECT(gathered->select(0, 1).eq(1).all().item<bool>());

  // Steps through the DDP wrapper.
  EXPECT(s.TrainingStep({}, 0).status().code() == absl::StatusCode::kFailedPrecondition);
  torch::manual_seed(rank);  // different initial weights: Setup must make them identical
  auto module = std::make_shared<Regressor>();
  EXPECT_OK(s.Setup(module));
  EXPECT(s.model() != nullptr && s.lightning_module() == module.get());
  torch::optim::SGD optimizer(module->parameters(), 0.05);
  torch::manual_seed(100 + rank);  // each rank its own shard
  at::Tensor x = torch::randn({16, 4});
  at::Tensor y = x.sum(1, true);
  double first_loss = 0, last_loss = 0;
  GradScaler* scaler = s.options().precision_plugin->grad_scaler();
  const std::vector<at::Tensor> parameters = module->parameters();
  for (int step = 0; step < 20; ++step) {
    optimizer.zero_grad();
    absl::StatusOr<at::Tensor> loss = s.TrainingStep({x, y}, step);
    EXPECT_OK(loss.status());
    // Step 7: rank 1's loss is inf, so the averaged gradients hold a NaN on both ranks and both
    // skip the step.
    const bool poisoned = scaler != nullptr && step == 7;
    if (poisoned && rank == 1) *loss = *loss * std::numeric_limits<float>::infinity();
    // The gradients DDP will average, unscaled, for comparison.
    std::vector<at::Tensor> unscaled;
    if (scaler != nullptr && !poisoned) {
      for (const at::Tensor& g : torch::autograd::grad({*loss}, parameters, {}, true)) {
        absl::StatusOr<at::Tensor> mean = s.Reduce(g, ReduceOp::kMean);
        EXPECT_OK(mean.status());
        unscaled.push_back(*mean);
      }
    }
    const double scale = scaler != nullptr ? scaler->scale() : 1.0;
    const at::Tensor before = Flat(parameters).clone();
    EXPECT_OK(s.Backward(*loss));
    for (size_t i = 0; i < unscaled.size(); ++i) {  // scaled by Backward
      EXPECT(torch::allclose(parameters[i].grad(), unscaled[i] * scale, 1e-5, 1e-6));
    }
    absl::StatusOr<bool> stepped = s.OptimizerStep(optimizer);
    EXPECT_OK(stepped.status());
    for (size_t i = 0; i < unscaled.size(); ++i) {  // unscaled by OptimizerStep
      EXPECT(torch::allclose(parameters[i].grad(), unscaled[i], 1e-5, 1e-8));
    }
    if (poisoned) {
      EXPECT(!*stepped && Flat(parameters).equal(before) && scaler->scale() == scale / 2);
      continue;
    }
    EXPECT(*stepped);
    absl::StatusOr<at::Tensor> mean_loss = s.Reduce(*loss, ReduceOp::kMean);
    EXPECT_OK(mean_loss.status());
    (step == 0 ? first_loss : last_loss) = mean_loss->item<double>();
  }
  EXPECT(last_loss < first_loss);
  // 1024, halved at step 7, doubled after every 5 good steps in a row: 7 good steps before (x2
  // after 5), 12 after (x2 after 5 and 10): 1024.
  if (scaler != nullptr) EXPECT(scaler->scale() == 1024.0 * 2 / 2 * 4);
  const bool bf16 = s.options().precision_plugin->name() == "bf16-mixed";
  EXPECT(module->last_output_dtype == (bf16 ? at::kBFloat16 : at::kFloat));
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : module->parameters()) flat.push_back(p.reshape({-1}));
  absl::StatusOr<at::Tensor> all_params = s.AllGather(torch::cat(flat).detach());
  EXPECT(all_params.ok() && all_params->select(0, 0).equal(all_params->select(0, 1)));
  absl::StatusOr<StepMetrics> metrics = s.ValidationStep({x, y}, 0);
  EXPECT(metrics.ok() && metrics->count("val_loss") == 1);
  absl::StatusOr<StepMetrics> test_metrics = s.TestStep({x, y}, 0);
  EXPECT(test_metrics.ok() && test_metrics->count("val_loss") == 1);
  absl::StatusOr<at::Tensor> prediction = s.PredictStep({x}, 0);
  EXPECT(prediction.ok() && prediction->sizes() == at::IntArrayRef({16, 1}));

  // Checkpoints: rank 0 writes, everyone can load.
  const std::string path =
      absl::StrCat(g_checkpoint_dir, "/model-", StartMethodName(s.options().start_method), ".pt");
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(*module, nullptr, {});
  EXPECT_OK(bytes.status());
  EXPECT_OK(s.SaveCheckpoint(*bytes, path));
  at::Tensor saved = torch::cat(flat).detach().clone();
  {
    torch::NoGradGuard no_grad;
    for (const at::Tensor& p : module->parameters()) p.add_(1.0);
  }
  absl::StatusOr<std::string> loaded = s.LoadCheckpoint(path);
  EXPECT_OK(loaded.status());
  EXPECT_OK(RestoreCheckpoint(*loaded, *module, nullptr, nullptr));
  flat.clear();
  for (const at::Tensor& p : module->parameters()) flat.push_back(p.reshape({-1}));
  EXPECT(torch::cat(flat).equal(saved));
  EXPECT(!s.LoadCheckpoint(path + ".missing").ok());
  EXPECT(!RestoreCheckpoint("not a checkpoint", *module, nullptr, nullptr).ok());

  // A SyncBatchNorm the model declares normalizes over both ranks' batches (Setup gives it the
  // group): rank 0's batch is all 0 and rank 1's all 1, so one step moves the running mean by
  // momentum x 0.5 on both ranks.
  auto normalized =
      std::make_shared<Regressor>(torch::nn::Sequential(SyncBatchNorm(4), torch::nn::Linear(4, 1)));
  EXPECT_OK(s.Setup(normalized));
  const at::Tensor own = torch::full({8, 4}, static_cast<float>(rank));
  EXPECT_OK(s.TrainingStep({own, own.sum(1, true)}, 0).status());
  auto sync = normalized->network()->modules()[1]->as<SyncBatchNormImpl>();
  EXPECT(sync != nullptr && sync->process_group() == s.group());
  EXPECT(torch::allclose(sync->running_mean, torch::full({4}, 0.05f)));
  return absl::StrCat("ok: loss ", first_loss, " -> ", last_loss);
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  ddpspawn::ServeForksIfForkserver();
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: %s spawn|fork|forkserver 32-true|bf16-mixed|scaled-32 CHECKPOINT_DIR\n",
                 argv[0]);
    return 64;
  }
  ddpspawn::g_checkpoint_dir = argv[3];
  ddpspawn::StrategyOptions options;
  options.parallel_devices = {c10::Device(c10::kCPU), c10::Device(c10::kCPU)};
  absl::StatusOr<ddpspawn::StartMethod> method = ddpspawn::ParseStartMethod(argv[1]);
  const bool scaled = std::strcmp(argv[2], "scaled-32") == 0;
  absl::StatusOr<ddpspawn::Precision> precision =
      scaled ? ddpspawn::Precision::k32True : ddpspawn::ParsePrecision(argv[2]);
  if (!method.ok() || !precision.ok()) {
    std::fprintf(stderr, "%s %s\n", method.status().ToString().c_str(),
                 precision.status().ToString().c_str());
    return 64;
  }
  options.start_method = *method;
  options.timeout = absl::Seconds(60);
  options.launch_timeout = absl::Seconds(120);
  options.precision_plugin = scaled ? std::make_shared<ddpspawn::ScaledFullPrecision>()
                                    : ddpspawn::MakePrecisionPlugin(*precision);
  ddpspawn::DDPSpawnStrategy strategy(options);
  if (ddpspawn::IsWorkerProcess()) return strategy.RunWorker(ddpspawn::Work);
  absl::StatusOr<std::string> result = strategy.Launch(ddpspawn::Work);
  if (!result.ok()) {
    std::printf("launch failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("rank 0: %s\n", result->c_str());
  return 0;
}
