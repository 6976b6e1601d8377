// Fabric's verbs (fabric.h): each is a DDPSpawnStrategy call, a LibTorch call or a logger's, with
// its status thrown as a FabricError.
#include "core/fabric/fabric.h"

#include <ATen/Context.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ddp/gradient_clipping.h"
#include "core/ddp/post_local_sgd.h"
#include "core/ddp/shard_grad_op_optimizer.h"
#include "core/ddp/sharded_optimizer.h"
#include "core/ddp/zero_redundancy_optimizer.h"
#include "core/env/rank_zero.h"
#include "core/model/checkpoint.h"
#include "core/model/module.h"
#include "core/train/loggers/csv_logger.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

StrategyOptions StrategyOf(const FabricOptions& fabric) {
  StrategyOptions options = fabric.strategy;
  options.accelerator = fabric.accelerator;
  options.num_nodes = fabric.num_nodes;
  options.parallel_devices.clear();
  for (int i = 0; i < fabric.devices; ++i) {
    options.parallel_devices.push_back(fabric.accelerator == Accelerator::kCuda
                                           ? c10::Device(c10::kCUDA, static_cast<int8_t>(i))
                                           : c10::Device(c10::kCPU));
  }
  options.precision_plugin = MakePrecisionPlugin(fabric.precision);
  return options;
}

// Why `options` cannot run, or OK.
absl::Status CheckOptions(const FabricOptions& options) {
  if (options.devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fabric: devices must be at least 1, got ", options.devices));
  }
  if (options.precision == Precision::k16Mixed) {
    return absl::UnimplementedError(
        "Fabric: precision 16-mixed is not supported: its loss scale must come off the gradients "
        "before optimizer.step(), which a LibTorch optimizer cannot be made to do; use 32-true or "
        "bf16-mixed, or the Trainer, whose optimizer step unscales");
  }
  if (options.strategy.start_method == StartMethod::kForkserver) {
    return absl::UnimplementedError(
        "Fabric: start method forkserver is not supported (its server must start before main() "
        "does anything else, with ServeForksIfForkserver()); use spawn or fork");
  }
  if (options.strategy.sharding_strategy == ShardingStrategy::kFullShard) {
    return absl::UnimplementedError(
        "Fabric: sharding_strategy full_shard is not supported: a loop's own forward must run "
        "each unit through the wrapper, which Setup() cannot do for it; use shard_grad_op, or "
        "FullShard::Wrap(module, units, fabric.strategy().group()) in the loop (docs/sharding.md)");
  }
  if (options.zero_redundancy_optimizer &&
      options.strategy.ddp_comm_hook == CommHookKind::kPostLocalSgd) {
    return ZeroRedundancyWithLocalSgdError();
  }
  return CheckShardingStrategy(options.strategy.sharding_strategy,
                               options.zero_redundancy_optimizer,
                               CommHookName(options.strategy.ddp_comm_hook));
}

// A loop's own module as the checkpoint format sees it: its tensors by name, borrowed. It has no
// steps (the loop is the user's).
class LoopModule final : public NnModule {
 public:
  explicit LoopModule(torch::nn::Module& module)
      : NnModule(
            std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &module)) {}
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& /*batch*/, int64_t /*index*/) override {
    return NoSteps();
  }
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& /*batch*/, int64_t /*index*/) override {
    return NoSteps();
  }
  absl::StatusOr<at::Tensor> PredictStep(const Batch& /*batch*/, int64_t /*index*/) override {
    return NoSteps();
  }

 private:
  static absl::Status NoSteps() {
    return absl::UnimplementedError("a Fabric loop's module has no Lightning steps");
  }
};

}  // namespace

FabricError::FabricError(absl::Status status)
    : std::runtime_error(status.ToString()), status_(std::move(status)) {}

Fabric::Fabric(FabricOptions options)
    : options_(std::move(options)), strategy_(StrategyOf(options_)) {}

Fabric::Fabric(int devices)
    : Fabric([devices] {
        FabricOptions options;
        options.devices = devices;
        return options;
      }()) {}

Fabric::~Fabric() = default;

absl::StatusOr<std::string> Fabric::LaunchLoop(const std::function<std::string(Fabric&)>& loop) {
  if (absl::Status valid = CheckOptions(options_); !valid.ok()) return valid;
  auto in_rank = [this, &loop](DDPSpawnStrategy& /*strategy*/) -> absl::StatusOr<std::string> {
    in_rank_ = true;
    try {
      std::string result = loop(*this);
      in_rank_ = false;
      return result;
    } catch (const FabricError& e) {  // its own code, not the exception's
      in_rank_ = false;
      return e.status();
    } catch (...) {  // the strategy turns it into an error
      in_rank_ = false;
      throw;
    }
  };
  if (IsWorkerProcess()) {  // a spawned rank: it ends here, its group torn down first
    const int code = strategy_.RunWorker(in_rank);
    (void)strategy_.Teardown();  // after a failed fn too (RunWorker tears down a successful one)
    std::exit(code);
  }
  return strategy_.Launch(in_rank);
}

void Fabric::RequireInRank(absl::string_view verb) const {
  if (!in_rank_) {
    Throw(absl::FailedPreconditionError(
        absl::StrCat("Fabric::", verb, " is for a rank's function: call it inside Launch()")));
  }
}

void Fabric::Throw(const absl::Status& status) const { throw FabricError(status); }

PyTorchDistributedSampler Fabric::Sampler(int64_t dataset_size, bool shuffle, uint64_t seed,
                                          bool drop_last) const {
  RequireInRank("Sampler");
  absl::StatusOr<PyTorchDistributedSampler> sampler = PyTorchDistributedSampler::Create(
      dataset_size, world_size(), global_rank(), shuffle, seed, drop_last);
  if (!sampler.ok()) Throw(sampler.status());
  return *std::move(sampler);
}

void Fabric::RequireShardGradOpOptimizer(absl::string_view verb,
                                         const torch::optim::Optimizer* optimizer) const {
  if (options_.strategy.sharding_strategy != ShardingStrategy::kShardGradOp) return;
  if (optimizer != nullptr ? dynamic_cast<const ShardedOptimizer*>(optimizer) != nullptr
                           : sharded_optimizer_made_) {
    return;
  }
  Throw(absl::FailedPreconditionError(absl::StrCat(
      verb,
      ": under sharding_strategy shard_grad_op each rank keeps only its rows of the gradients, "
      "which a plain optimizer never sees (it would step nothing): make the optimizer with "
      "SetupOptimizer(model, make)")));
}

void Fabric::Backward(const at::Tensor& loss) {
  RequireInRank("Backward");
  RequireShardGradOpOptimizer("Backward", nullptr);
  absl::Status status = StatusOnException("backward failed", [&] { loss.backward(); });
  if (!status.ok()) Throw(status);
}

std::unique_ptr<torch::optim::Optimizer> Fabric::SetupOptimizer(DistributedDataParallel& ddp,
                                                                const OptimizerMaker& make) {
  RequireInRank("SetupOptimizer");
  if (!make) Throw(absl::InvalidArgumentError("SetupOptimizer: no function to make the optimizer"));
  const bool shard_grad_op = options_.strategy.sharding_strategy == ShardingStrategy::kShardGradOp;
  sharded_optimizer_made_ = shard_grad_op;
  if (!shard_grad_op && !options_.zero_redundancy_optimizer) return make();
  OptimizerFactory factory = [make]() -> absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> {
    std::unique_ptr<torch::optim::Optimizer> made;
    RETURN_IF_ERROR(StatusOnException("making the optimizer", [&] { made = make(); }));
    if (made == nullptr) return absl::InvalidArgumentError("the optimizer maker returned null");
    return made;
  };
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> sharded;
  if (shard_grad_op) {
    sharded = ShardGradOpOptimizer::Create(std::move(factory), ddp);
  } else {
    sharded = ZeroRedundancyOptimizer::Create(std::move(factory), strategy_.group());
  }
  if (!sharded.ok()) {
    Throw(absl::Status(sharded.status().code(),
                       absl::StrCat("SetupOptimizer: ", sharded.status().message())));
  }
  return *std::move(sharded);
}

double Fabric::ClipGradients(torch::optim::Optimizer& optimizer, double max_norm,
                             double norm_type) {
  RequireInRank("ClipGradients");
  RequireShardGradOpOptimizer("ClipGradients", &optimizer);
  const auto* sharded = dynamic_cast<const ShardedOptimizer*>(&optimizer);
  absl::StatusOr<double> norm = ClipParameterGradientNorm(
      sharded != nullptr ? sharded->StepGradientHolders() : AllParameters(optimizer), max_norm,
      norm_type, "the optimizer's parameter",
      sharded != nullptr ? sharded->gradient_shard_group() : nullptr);
  if (!norm.ok()) {
    Throw(absl::Status(norm.status().code(),
                       absl::StrCat("ClipGradients: ", norm.status().message())));
  }
  return *norm;
}

void Fabric::ClipGradientValues(torch::optim::Optimizer& optimizer, double clip_val) {
  RequireInRank("ClipGradientValues");
  RequireShardGradOpOptimizer("ClipGradientValues", &optimizer);
  const auto* sharded = dynamic_cast<const ShardedOptimizer*>(&optimizer);
  if (absl::Status status = ClipParameterGradientValue(
          sharded != nullptr ? sharded->StepGradientHolders() : AllParameters(optimizer), clip_val);
      !status.ok()) {
    Throw(status);
  }
}

at::Tensor Fabric::AllReduce(const at::Tensor& tensor, ReduceOp op) {
  RequireInRank("AllReduce");
  absl::StatusOr<at::Tensor> reduced = strategy_.Reduce(tensor, op);
  if (!reduced.ok()) Throw(reduced.status());
  return *std::move(reduced);
}

at::Tensor Fabric::AllGather(const at::Tensor& tensor) {
  RequireInRank("AllGather");
  absl::StatusOr<at::Tensor> gathered = strategy_.AllGather(tensor);
  if (!gathered.ok()) Throw(gathered.status());
  return *std::move(gathered);
}

at::Tensor Fabric::Broadcast(const at::Tensor& tensor, int src) {
  RequireInRank("Broadcast");
  if (!tensor.defined()) Throw(absl::InvalidArgumentError("Broadcast got an undefined tensor"));
  at::Tensor copy = tensor.detach().clone().contiguous();
  if (absl::Status status = strategy_.group()->Broadcast(copy, src); !status.ok()) Throw(status);
  return copy;
}

std::string Fabric::Broadcast(absl::string_view bytes, int src) {
  RequireInRank("Broadcast");
  absl::StatusOr<std::string> received = strategy_.Broadcast(bytes, src);
  if (!received.ok()) Throw(received.status());
  return *std::move(received);
}

void Fabric::Barrier(absl::string_view name) {
  RequireInRank("Barrier");
  if (absl::Status status = strategy_.Barrier(name); !status.ok()) Throw(status);
}

void Fabric::Save(const std::string& path, torch::nn::Module& model,
                  torch::optim::Optimizer* optimizer, int64_t step) {
  RequireInRank("Save");
  auto* sharded = dynamic_cast<ShardedOptimizer*>(optimizer);
  if (sharded != nullptr) {
    // Every rank's shard of the state to rank 0, whose save() then writes it whole.
    if (absl::Status status = sharded->ConsolidateStateDict(0); !status.ok()) Throw(status);
  }
  absl::StatusOr<std::string> bytes = "";
  if (is_global_zero()) {
    LoopModule module(model);
    TrainingState state;
    state.global_step = step;
    state.world_size = world_size();
    bytes = SerializeCheckpoint(module, optimizer, state);
    if (sharded != nullptr) sharded->ReleaseConsolidated();  // the whole state, on rank 0 alone
  }
  // Every rank learns whether rank 0 could serialize, then whether it could write.
  absl::StatusOr<std::string> failure =
      strategy_.Broadcast(bytes.ok() ? "" : bytes.status().ToString(), 0);
  if (!failure.ok()) Throw(failure.status());
  if (!bytes.ok()) Throw(bytes.status());
  if (!failure->empty()) {
    Throw(absl::InternalError(
        absl::StrCat("rank 0 could not serialize the checkpoint ", path, ": ", *failure)));
  }
  if (absl::Status status = strategy_.SaveCheckpoint(*bytes, path); !status.ok()) Throw(status);
}

int64_t Fabric::Load(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer* optimizer) {
  RequireInRank("Load");
  absl::StatusOr<std::string> bytes = strategy_.LoadCheckpoint(path);
  if (!bytes.ok()) Throw(bytes.status());
  LoopModule module(model);
  TrainingState state;
  if (absl::Status status = RestoreCheckpoint(*bytes, module, optimizer, &state); !status.ok()) {
    Throw(status);
  }
  return state.global_step;
}

void Fabric::Log(const std::string& name, double value, int64_t step, int64_t epoch) {
  LogDict({{name, value}}, step, epoch);
}

void Fabric::LogDict(const std::map<std::string, double>& values, int64_t step, int64_t epoch) {
  RequireInRank("Log");
  if (options_.log_dir.empty()) {
    Throw(absl::FailedPreconditionError(
        "Fabric::Log needs FabricOptions::log_dir, the directory of metrics.csv"));
  }
  const std::vector<std::pair<std::string, double>> rows(values.begin(), values.end());
  if (absl::Status names = CheckMetricNames(rows); !names.ok()) Throw(names);  // on every rank
  if (!is_global_zero()) return;
  if (absl::Status status = AppendMetricRows(options_.log_dir, epoch, step, rows); !status.ok()) {
    Throw(status);
  }
}

void Fabric::SeedEverything(uint64_t seed) { at::manual_seed(seed); }

void Fabric::Print(absl::string_view text) { RankZeroPrint(text); }

}  // namespace ddpspawn
