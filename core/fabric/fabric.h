// Fabric: Lightning Fabric's verbs for a LibTorch training loop of one's own, over a
// DDPSpawnStrategy. A single-process loop becomes data-parallel in five changed lines
// (docs/fabric.md): take a Fabric&, Setup() the model, draw from Sampler(), and Launch() the loop.
//
//   std::string Train(ddpspawn::Fabric& fabric) {
//     auto model = fabric.Setup(Net());  // a TORCH_MODULE holder, or a module variable
//     torch::optim::SGD optimizer(model->parameters(), 0.05);
//     auto loader = torch::data::make_data_loader(dataset, fabric.Sampler(dataset_size), 32);
//     for (auto& batch : *loader) { ... model(batch.data) ... loss.backward(); optimizer.step(); }
//     return "done";
//   }
//   int main() { std::puts(ddpspawn::Fabric(2).Launch(Train).value().c_str()); }
//
// Errors: every verb throws FabricError (a std::runtime_error that keeps the absl::Status), as
// LibTorch's own calls throw, so that a loop reads as it did in one process; Launch() turns what a
// rank throws into the job's error, naming the rank.
#ifndef DDPSPAWN_CORE_FABRIC_FABRIC_H_
#define DDPSPAWN_CORE_FABRIC_FABRIC_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ddp/ddp_module.h"
#include "core/strategy/ddp_spawn_strategy.h"
#include "core/strategy/distribute.h"
#include "core/strategy/precision.h"
#include "core/train/data/torch_data_sampler.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

// What a Fabric verb throws: its status, code and message (the launch names the rank).
class FabricError : public std::runtime_error {
 public:
  explicit FabricError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

struct FabricOptions {
  Accelerator accelerator = Accelerator::kCpu;
  // Ranks on each node: CPU processes, or one per GPU (cuda:0 .. cuda:devices-1).
  int devices = 1;
  int num_nodes = 1;
  // "32-true" or "bf16-mixed" (the module's forward runs under autocast). "16-mixed" is refused:
  // its loss scale must be taken off before optimizer.step(), which a LibTorch optimizer cannot be
  // made to do (use the Trainer, or DDPSpawnStrategy's OptimizerStep()).
  Precision precision = Precision::k32True;
  // The directory of Log()'s metrics.csv (the Trainer's: epoch,step,name,value rows), made by rank
  // 0 where missing; empty: Log() is refused.
  std::string log_dir;
  // ZeRO-1: SetupOptimizer() makes a ZeroRedundancyOptimizer (each rank keeps and steps its shard
  // of the optimizer state; DDP's all-reduce stays). Not with strategy.sharding_strategy
  // shard_grad_op, which shards the state itself.
  bool zero_redundancy_optimizer = false;
  // The rest (backend, timeouts, start method, DDP options, several nodes' rendezvous, ...): a
  // DDPSpawnStrategy's options, whose accelerator, parallel_devices, num_nodes and precision_plugin
  // the fields above replace. strategy.sharding_strategy may be no_shard or shard_grad_op (ZeRO-2:
  // Setup() makes DDP reduce-scatter, and SetupOptimizer() steps each rank's rows); full_shard is
  // refused (an own loop's forward must run each unit through FullShard::Wrap's wrapper:
  // docs/sharding.md), and so is the forkserver start method (its server must start before main()
  // does anything else: ServeForksIfForkserver()); spawn and fork work.
  StrategyOptions strategy;
};

// A module that Fabric::Setup() made data-parallel: called as the module was (its forward is torch
// DDP's, in the precision's autocast), `->` reaches the module itself (parameters(), train(),
// eval(), and forward() without DDP's buffer broadcast, for a rank that evaluates on its own).
// Thread safety and ownership: those of DdpModule, which it owns; it shares the precision plugin.
// Its DDP wrapper uses the rank's process group, which Launch() ends when the rank's function
// returns: use it within that function.
template <typename ModuleType>
class FabricModule {
 public:
  FabricModule(DdpModule<ModuleType> ddp, std::shared_ptr<PrecisionPlugin> precision, bool cuda)
      : ddp_(std::move(ddp)), precision_(std::move(precision)), cuda_(cuda) {}

  template <typename... Inputs>
  auto operator()(Inputs&&... inputs) {
    std::unique_ptr<PrecisionPlugin::StepContext> autocast = precision_->ForwardContext(cuda_);
    return ddp_(std::forward<Inputs>(inputs)...);
  }
  ModuleType* operator->() { return &ddp_.module(); }
  ModuleType& operator*() { return ddp_.module(); }
  ModuleType& module() { return ddp_.module(); }
  DdpModule<ModuleType>& ddp() { return ddp_; }

 private:
  DdpModule<ModuleType> ddp_;
  std::shared_ptr<PrecisionPlugin> precision_;
  bool cuda_;
};

// Thread safety: not thread-safe; the launching thread calls Launch(), and a rank's loop thread the
// rest. Ownership: owns its DDPSpawnStrategy (the process group, the ranks of a launch) and the
// metrics logger.
class Fabric {
 public:
  explicit Fabric(FabricOptions options);
  // `devices` CPU ranks (or GPUs, with accelerator kCuda) on one node.
  explicit Fabric(int devices);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // --- Launching
  // Runs `fn(fabric)` on every rank and returns rank 0's result (what fn returned; empty for an fn
  // that returns nothing). In the launching process it starts the ranks, which rerun main() up to
  // this call (as Python's spawn reimports the module), and waits for them: a rank that throws or
  // dies fails the job, and the error names it. In a rank that this launch started, it runs fn and
  // ends the process (std::exit) with the rank's exit code: it does not return. In a process that
  // torchrun or srun started as one rank of a job, it joins that job, runs fn and returns rank 0's
  // result on every rank.
  template <typename Fn>
  absl::StatusOr<std::string> Launch(Fn&& fn) {
    return LaunchLoop([&fn](Fabric& fabric) -> std::string {
      if constexpr (std::is_void_v<std::invoke_result_t<Fn&, Fabric&>>) {
        fn(fabric);
        return std::string();
      } else {
        return std::string(fn(fabric));
      }
    });
  }

  // --- Where this rank is (in a rank's fn)
  int global_rank() const { return strategy_.global_rank(); }
  int local_rank() const { return strategy_.local_rank(); }
  int node_rank() const { return strategy_.node_rank(); }
  int world_size() const { return strategy_.world_size(); }
  bool is_global_zero() const { return strategy_.is_global_zero(); }
  c10::Device device() const { return strategy_.root_device(); }
  // The strategy under it, for what Fabric has no verb for.
  DDPSpawnStrategy& strategy() { return strategy_; }

  // --- Model and data
  // Lightning's setup_module: moves the model to this rank's device, gives every rank rank 0's
  // weights and wraps it in DDP with the strategy's options (Distribute(model, strategy)). A
  // TORCH_MODULE holder is shared; a module held by value is borrowed and must outlive the result.
  template <typename Model>
  auto Setup(Model&& model) {
    using Plain = std::decay_t<Model>;
    if constexpr (std::is_base_of_v<torch::nn::Module, Plain>) {
      static_assert(std::is_lvalue_reference_v<Model>,
                    "Fabric::Setup borrows a module held by value: pass one that outlives it");
      return Wrap<Plain>(Distribute(model, strategy_));
    } else {
      Plain holder = model;  // shares the module
      return Wrap<typename Plain::ContainedType>(Distribute(holder, strategy_));
    }
  }
  // Lightning's setup_optimizers: the optimizer `make` returns (over the parameters of a model that
  // Setup() made data-parallel, the same tensors each call), as the sharding asks: itself under
  // no_shard; under zero_redundancy_optimizer a ZeroRedundancyOptimizer, under shard_grad_op a
  // ShardGradOpOptimizer over `model`'s reducer, which call `make` again for each rank's shard. Use
  // it as the plain one (zero_grad(), step(): a collective when sharded). SGD, Adam, AdamW, RMSprop
  // and Adagrad shard exactly (docs/sharding.md).
  using OptimizerMaker = std::function<std::unique_ptr<torch::optim::Optimizer>()>;
  template <typename Model>
  std::unique_ptr<torch::optim::Optimizer> SetupOptimizer(FabricModule<Model>& model,
                                                          const OptimizerMaker& make) {
    return SetupOptimizer(model.ddp().ddp(), make);
  }
  std::unique_ptr<torch::optim::Optimizer> SetupOptimizer(DistributedDataParallel& ddp,
                                                          const OptimizerMaker& make);
  // Lightning's setup_dataloaders: this rank's share of a dataset of `dataset_size` samples, dealt
  // as torch's DistributedSampler deals it (a new shuffle each pass over the loader, seeded by
  // `seed`), for torch::data::make_data_loader. The batches stay where the dataset made them: on
  // CUDA, move them to device().
  PyTorchDistributedSampler Sampler(int64_t dataset_size, bool shuffle = true, uint64_t seed = 0,
                                    bool drop_last = false) const;

  // --- Steps
  // loss.backward() (the gradients averaged across the ranks as it runs). Under shard_grad_op it,
  // and the clipping verbs, throw FailedPrecondition before SetupOptimizer() made the optimizer (or
  // with another one): a plain optimizer would never see the gradients' rows, and step nothing.
  void Backward(const at::Tensor& loss);
  // Lightning's no_backward_sync: while the guard lives, backward accumulates gradients on each
  // rank without averaging them when `enabled`; the first backward after it averages everything.
  // Every rank must enter it alike.
  template <typename Model>
  DistributedDataParallel::NoSync NoBackwardSync(FabricModule<Model>& model, bool enabled = true) {
    return model.ddp().no_sync(enabled);
  }
  // Lightning's clip_gradients with max_norm: scales the gradients of `optimizer`'s parameters so
  // that their `norm_type` norm is at most `max_norm`, and returns the norm before clipping (the
  // same on every rank: the gradients are already averaged; under shard_grad_op the norm of every
  // rank's rows, as FSDP's clip_grad_norm_). A gradient with a NaN or an infinity throws, naming
  // the parameter, before anything is clipped.
  double ClipGradients(torch::optim::Optimizer& optimizer, double max_norm, double norm_type = 2);
  // Lightning's clip_gradients with clip_val: each gradient element clamped to [-clip_val,
  // clip_val].
  void ClipGradientValues(torch::optim::Optimizer& optimizer, double clip_val);

  // --- Collectives (every rank calls each, in the same order)
  // A reduced copy of `tensor` (the mean by default, as Lightning's all_reduce).
  at::Tensor AllReduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kMean);
  // Every rank's `tensor`, stacked along a new first dimension.
  at::Tensor AllGather(const at::Tensor& tensor);
  // Rank `src`'s tensor (same shape and dtype on every rank) or bytes.
  at::Tensor Broadcast(const at::Tensor& tensor, int src = 0);
  std::string Broadcast(absl::string_view bytes, int src = 0);
  void Barrier(absl::string_view name = "");

  // --- Checkpoints, logs, seeds
  // Rank 0 writes `model`'s weights, `optimizer`'s state (when given) and `step` in the Trainer's
  // checkpoint format (what `ddpspawn fit --resume-from`, `ddpspawn export` and Load() read); every
  // rank learns whether it worked. A collective. A sharded optimizer's state is gathered to rank 0
  // first and written unsharded (Load() gives each rank its shard of it, on any number of ranks,
  // sharded or not).
  void Save(const std::string& path, torch::nn::Module& model,
            torch::optim::Optimizer* optimizer = nullptr, int64_t step = 0);
  template <typename Model>
  void Save(const std::string& path, FabricModule<Model>& model,
            torch::optim::Optimizer* optimizer = nullptr, int64_t step = 0) {
    Save(path, static_cast<torch::nn::Module&>(model.module()), optimizer, step);
  }
  // Reads a checkpoint (Save()'s or the Trainer's) into `model` and `optimizer` on this rank, and
  // returns its step. A tensor that the model has and the checkpoint lacks, or of another shape,
  // throws naming it.
  int64_t Load(const std::string& path, torch::nn::Module& model,
               torch::optim::Optimizer* optimizer = nullptr);
  template <typename Model>
  int64_t Load(const std::string& path, FabricModule<Model>& model,
               torch::optim::Optimizer* optimizer = nullptr) {
    return Load(path, static_cast<torch::nn::Module&>(model.module()), optimizer);
  }
  // Lightning's log / log_dict: rank 0 appends the values at `step` to log_dir/metrics.csv (whose
  // epoch column holds `epoch`); the other ranks write nothing.
  void Log(const std::string& name, double value, int64_t step, int64_t epoch = 0);
  void LogDict(const std::map<std::string, double>& values, int64_t step, int64_t epoch = 0);
  // Lightning's seed_everything: torch's generators (CPU, and CUDA where there is one) on this
  // rank.
  void SeedEverything(uint64_t seed);
  // Lightning's print: `text` on stdout once, from rank 0.
  void Print(absl::string_view text);

 private:
  absl::StatusOr<std::string> LaunchLoop(const std::function<std::string(Fabric&)>& loop);
  template <typename Module>
  FabricModule<Module> Wrap(absl::StatusOr<DdpModule<Module>> ddp) {
    if (!ddp.ok()) Throw(ddp.status());
    return FabricModule<Module>(*std::move(ddp), strategy_.options().precision_plugin,
                                device().is_cuda());
  }
  // FailedPrecondition naming `verb` outside a rank's fn.
  void RequireInRank(absl::string_view verb) const;
  // Throws FabricError with `status`.
  [[noreturn]] void Throw(const absl::Status& status) const;
  // Under shard_grad_op, FailedPrecondition naming `verb` unless `optimizer` is sharded (null:
  // unless SetupOptimizer() made one): a plain optimizer would silently step nothing.
  void RequireShardGradOpOptimizer(absl::string_view verb,
                                   const torch::optim::Optimizer* optimizer) const;

  FabricOptions options_;
  DDPSpawnStrategy strategy_;
  bool in_rank_ = false;
  bool sharded_optimizer_made_ = false;  // SetupOptimizer() made a ShardGradOpOptimizer
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_FABRIC_FABRIC_H_
