// DDPSpawnStrategy: PyTorch Lightning's strategy of the same name, in C++. It has a launcher
// (spawn, fork or forkserver), a cluster environment, a checkpoint IO and a precision plugin; it
// joins the process group (nccl on CUDA devices, gloo on CPU), wraps the module in
// DistributedDataParallel (with the DDP options and comm hooks), runs the steps through it, and
// offers the collectives a training loop needs.
//
// Launching. In the launching process, Launch(fn) starts num_processes ranks and returns rank 0's
// result. With start_method "spawn" each rank re-runs this program's command line, so main() must
// send workers to RunWorker(fn):
//
//   DDPSpawnStrategy strategy(options);
//   if (IsWorkerProcess()) return strategy.RunWorker(fn);
//   absl::StatusOr<std::string> result = strategy.Launch(fn);
//
// With "forkserver" the program's command line runs once more, as a server that forks the ranks
// (core/launch/forkserver.h), so main() must also begin with ServeForksIfForkserver(), before it
// reads its arguments or environment.
//
// With "fork", fn runs in forked children, on a new thread there (so that OpenMP work this process
// did before does not hang it; see LaunchSpec::fork_worker_thread), and RunWorker is not needed.
#ifndef DDPSPAWN_CORE_STRATEGY_DDP_SPAWN_STRATEGY_H_
#define DDPSPAWN_CORE_STRATEGY_DDP_SPAWN_STRATEGY_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/post_local_sgd.h"
#include "core/ddp/sharding_strategy.h"
#include "core/env/cluster_environment.h"
#include "core/launch/forkserver.h"
#include "core/launch/launcher.h"
#include "core/model/module.h"
#include "core/strategy/checkpoint_io.h"
#include "core/strategy/module_sharding.h"
#include "core/strategy/precision.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddpspawn {

class NodeJob;

// True in a process that a ddpspawn launcher started.
bool IsWorkerProcess();

// Lightning's accelerator: where the ranks' models run ("cpu", "cuda"; "gpu" is "cuda").
enum class Accelerator { kCpu, kCuda };
absl::string_view AcceleratorName(Accelerator accelerator);
absl::StatusOr<Accelerator> ParseAccelerator(absl::string_view name);

// A compression wrapped around the communication hook (Lightning's ddp_comm_wrapper).
enum class CommWrapper { kNone, kFp16, kBf16 };

struct StrategyOptions {
  Accelerator accelerator = Accelerator::kCpu;
  // One per local rank: local rank i runs on parallel_devices[i] (its model, buckets and NCCL
  // communicator); "cuda:N" devices for accelerator "cuda".
  std::vector<c10::Device> parallel_devices = {c10::Device(c10::kCPU)};
  // Several nodes, one Launch() on each (torchrun's --nnodes, --node-rank, --master-addr,
  // --master-port): node 0's launcher serves the rendezvous at master_addr:master_port (see
  // core/job/node_rendezvous.h); ranks are node_rank * num_processes + local rank.
  int num_nodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 29500;
  // What every node runs (e.g. the command and model): the rendezvous refuses a node whose
  // description differs.
  std::string job_description;
  // Reads this rank's place in the world; default: DetectClusterEnvironment().
  std::function<absl::StatusOr<ClusterInfo>()> cluster_environment;
  std::shared_ptr<CheckpointIO> checkpoint_io;        // default: atomic files
  std::shared_ptr<PrecisionPlugin> precision_plugin;  // default: Precision::k32True's
  // Communication hook: a built-in one, or an object (which takes precedence).
  CommHookKind ddp_comm_hook = CommHookKind::kAllReduce;
  std::shared_ptr<CommHook> ddp_comm_hook_object;
  std::shared_ptr<PowerSgdState> ddp_comm_state;  // PowerSGD's state, when ddp_comm_hook is one
  CommWrapper ddp_comm_wrapper = CommWrapper::kNone;
  // ddp_comm_hook kPostLocalSgd's start, gradient averaging within nodes and Lightning's
  // model_averaging_period (required with it, refused without).
  PostLocalSgdOptions post_localsgd;
  std::optional<Backend> process_group_backend;  // none: nccl on CUDA devices, gloo on CPU
  absl::Duration timeout = kDefaultTimeout;
  StartMethod start_method = StartMethod::kSpawn;
  // "fork": the ranks close every descriptor of this process above 2 first (for an fn that opens
  // what it uses; see LaunchSpec::fork_close_descriptors).
  bool fork_close_descriptors = false;
  // NAME=value for every rank's environment besides the launcher's own (e.g. what a restarted job's
  // ranks continue from).
  std::vector<std::string> worker_env;
  DdpOptions ddp;  // find_unused_parameters, broadcast_buffers, ...
  // shard_grad_op (ZeRO-2): the DDP wrapper reduce-scatters its buckets (ddp.reducer's
  // shard_gradients), and the loop's optimizer must be a ShardGradOpOptimizer over it (the Trainer
  // makes one). full_shard (ZeRO-3): Setup() wraps the module in a FullShard over its ShardUnits()
  // (a module that names none, a TorchScript model, is one unit, gathered for each training step),
  // and the Trainer gathers the parameters whole around evaluation and checkpoints
  // (GatherParameters()).
  ShardingStrategy sharding_strategy = ShardingStrategy::kNoShard;
  // full_shard's units (FSDP's size_based_auto_wrap_policy, core/ddp/size_based_units.h): 0 takes
  // the module's own ShardUnits(); N > 0 lets the sizes choose (a module becomes a unit once it
  // holds at least N trainable elements no unit below it holds; the root takes the rest), for a
  // module whose forward runs its parts through the shard (one that names ShardUnits()). And
  // FSDP2's reshard_after_forward, and FSDP's prefetch (FullShardOptions).
  int64_t auto_wrap_min_params = 0;
  bool reshard_after_forward = true;
  bool full_shard_prefetch = true;
  // Lightning's sync_batchnorm: Setup() and an own loop's Distribute(model, strategy) replace the
  // BatchNorm layers of the model's Sequential containers with SyncBatchNorm
  // (core/ddp/sync_batch_norm.h), and refuse a model where that would change nothing
  // (ApplySyncBatchNorm). A wrapper made over the strategy's group any other way refuses a model
  // that still holds a BatchNorm layer. SyncBatchNorm layers a module declares itself normalize
  // over the group either way.
  bool sync_batchnorm = false;
  absl::Duration launch_timeout = absl::InfiniteDuration();  // whole job, for Launch()
  // Elastic (LaunchSpec::min_ranks): a rank the job loses is dropped while at least this many go
  // on, which then Rejoin(); 0: a lost rank fails the job.
  int min_ranks = 0;
  // Elastic: how many lost ranks the launcher starts again in all (LaunchSpec::max_replacements).
  int max_replacements = 0;
};

// sync_batchnorm on `module`: converts the BatchNorm layers of its Sequential containers
// (ConvertSyncBatchNorm). InvalidArgument where the option would change nothing: a TorchScript
// module (its layers are not LibTorch modules, and torch.nn.SyncBatchNorm cannot be scripted), or a
// module with neither a BatchNorm nor a SyncBatchNorm layer. Setup() calls it in every rank; the
// CLI and ddpspawn_run call it before any rank starts (CheckRun).
absl::Status ApplySyncBatchNorm(LightningModule& module);

// Lightning's distributed_sampler_kwargs.
struct DistributedSamplerArgs {
  int num_replicas = 1;
  int rank = 0;
};

// Thread-safety: not thread-safe; one thread drives it: the launching thread for Launch() and
// restarts, a rank's training thread for the rest (autograd's threads run only its reducer's hooks,
// which the reducer guards). Ownership: it owns the process group and the DDP wrapper (Teardown()
// releases both, the wrapper first) and, after Launch(), this node's NodeJob (its ranks and the
// rendezvous); it shares the module, checkpoint IO, precision plugin and comm hook with its caller.
class DDPSpawnStrategy {
 public:
  // A rank's work; its result (rank 0's) goes back to the launching process.
  using WorkerFn = std::function<absl::StatusOr<std::string>(DDPSpawnStrategy& strategy)>;

  explicit DDPSpawnStrategy(StrategyOptions options = {});
  ~DDPSpawnStrategy();

  // --- Launching
  // --------------------------------------------------------------------------
  // In the launching process: starts the ranks and returns rank 0's result; a failing rank's error
  // names it and its cause. With num_nodes > 1, every node calls Launch() and gets rank 0's result
  // (node 0's launcher hands it over), and a node whose ranks failed because another node's did
  // says which failed first. In a process that torchrun, srun (more than one task) or the user
  // (WORLD_SIZE > 1) started as one rank of a job, it launches nothing: it joins that job as that
  // rank, runs fn and returns rank 0's result on every rank; the node's process count must equal
  // num_processes().
  absl::StatusOr<std::string> Launch(const WorkerFn& fn);
  // After Launch(): the rank whose failure ended the job (-1: none failed, e.g. success, a timeout
  // or an interrupt) and how every rank ended.
  int last_failed_rank() const;
  // Replaces StrategyOptions::worker_env for the next Launch().
  void set_worker_env(std::vector<std::string> env) { options_.worker_env = std::move(env); }
  // After a failed Launch(), to run the ranks again (max_restarts): the next Launch() starts the
  // next generation, whose ranks see it in TORCHELASTIC_RESTART_COUNT. Returns the checkpoint they
  // continue from: `resume_from` on one node. With several nodes every node's launcher calls it (or
  // DeclineRestart()), and all restart or none: node 0's `resume_from` is every node's (each checks
  // that it can read it). A multi-node Launch() that failed keeps node 0's rendezvous served until
  // one of the two is called, or the next Launch(). FailedPrecondition when the job cannot restart
  // (a node that never reported, refused or declined), else the rendezvous' error.
  absl::StatusOr<std::string> PrepareRestart(const std::string& resume_from);
  // After a failed Launch() that this launcher does not restart, because `why`: the other nodes'
  // PrepareRestart() fails at once naming it.
  void DeclineRestart(const std::string& why);
  const std::vector<RankOutcome>& last_outcomes() const;
  // In a spawned rank: SetupDistributed(), fn, hand the result back, Teardown(); returns the
  // process exit code.
  int RunWorker(const WorkerFn& fn);

  // --- Lifecycle
  // --------------------------------------------------------------------------
  // Reads the cluster environment and joins the process group; a replacement rank of an elastic fit
  // (DDPSPAWN_ELASTIC_JOIN=1) joins none yet: it awaits_elastic_join() until Rejoin().
  absl::Status SetupDistributed();
  // ModelToDevice(), then wraps the module's network in DistributedDataParallel.
  absl::Status Setup(std::shared_ptr<LightningModule> module);
  absl::Status ModelToDevice();
  // The own loop's Setup (Fabric's setup_module): what Distribute(model, strategy)
  // (core/strategy/distribute.h) calls. Converts the BatchNorm layers with sync_batchnorm (refusing
  // where it would change nothing), moves `module` to root_device(), and wraps it over the group
  // with the strategy's DDP options and communication hook. `owner` holds `module`, or is null for
  // a borrowed module (which must outlive the wrapper). Needs SetupDistributed() (a rank's fn runs
  // after it).
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> WrapModule(
      torch::nn::Module& module, std::shared_ptr<torch::nn::Module> owner = nullptr);
  // Releases the DDP wrapper and the process group.
  absl::Status Teardown();
  // After the job lost ranks (elastic): drops the DDP wrapper, the module and the process group
  // without a collective (a peer is gone), and joins the survivors' new group as `cluster` says
  // (its rank and world size among them), the job's `generation`-th group (GroupOptions), which
  // every member names alike. The module must be Setup() again.
  absl::Status Rejoin(const ClusterInfo& cluster, int generation);
  // A replacement rank before Rejoin(): in no group, so no rank 0 either.
  bool awaits_elastic_join() const { return awaits_elastic_join_; }

  // --- Properties
  // -------------------------------------------------------------------------
  int global_rank() const { return cluster_.rank; }
  int local_rank() const { return cluster_.local_rank; }
  int node_rank() const { return cluster_.node_rank; }
  int world_size() const { return cluster_.world_size; }
  // This rank's place in the job (after SetupDistributed()).
  const ClusterInfo& cluster() const { return cluster_; }
  int num_nodes() const { return options_.num_nodes; }
  int num_processes() const { return static_cast<int>(options_.parallel_devices.size()); }
  bool is_global_zero() const { return !awaits_elastic_join_ && global_rank() == 0; }
  c10::Device root_device() const;
  Backend process_group_backend() const;
  DistributedSamplerArgs distributed_sampler_kwargs() const {
    return {world_size(), global_rank()};
  }
  const StrategyOptions& options() const { return options_; }
  ProcessGroup* group() { return group_.get(); }
  // The DDP wrapper of Setup()'s module (under full_shard, its FullShard's); null before.
  DistributedDataParallel* model();
  // full_shard: every parameter whole until the matching ReleaseParameters() (FullShard::GatherAll
  // and ReshardAll; the calls nest; a collective), on rank `only_rank` alone when it is given.
  // Nothing to do under the other strategies.
  absl::Status GatherParameters(int only_rank = -1);
  absl::Status ReleaseParameters();
  // full_shard: how many units Setup() wrapped; 0 under the other strategies.
  size_t full_shard_units() const {
    return sharded_.shard != nullptr ? sharded_.shard->unit_count() : 0;
  }
  LightningModule* lightning_module() { return module_.get(); }

  // --- Collectives
  // ------------------------------------------------------------------------
  absl::Status Barrier(absl::string_view name = "");
  // Rank `src`'s bytes on every rank (objects: serialize them first).
  absl::StatusOr<std::string> Broadcast(absl::string_view bytes, int src = 0);
  // A reduced copy of `tensor` (mean by default, as Lightning's reduce).
  absl::StatusOr<at::Tensor> Reduce(const at::Tensor& tensor, ReduceOp reduce_op = ReduceOp::kMean);
  // As in Lightning, anything that is not a tensor passes through unchanged.
  template <typename T>
  T Reduce(T value, ReduceOp /*reduce_op*/ = ReduceOp::kMean) {
    return value;
  }
  // Every rank's tensor stacked along a new first dimension (world_size, ...).
  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& tensor);

  // --- Steps
  // ------------------------------------------------------------------------------
  // Nothing to prepare: the reducer finds unused parameters when backward ends.
  absl::Status PreBackward(const at::Tensor& loss);
  // Lightning's strategy.backward: PreBackward, then backward of the loss scaled by the precision
  // plugin's loss scaler ("16-mixed"; else as it is). Use it (not loss.backward()) in a
  // hand-written loop, with OptimizerStep.
  absl::Status Backward(const at::Tensor& loss);
  // Lightning's strategy.optimizer_step: with a loss scaler, divides the optimizer's gradients
  // (already averaged by DDP, so equal on every rank) by the scale and skips the step on every rank
  // when any holds an inf or a NaN, then adjusts the scale; `before_step` (e.g. gradient clipping)
  // sees the unscaled gradients of a step that is taken. Returns whether the optimizer stepped. The
  // gradients are not zeroed. With post-local SGD, the model averager's turn follows (a collective
  // when due), also after a skipped step, as in Lightning.
  absl::StatusOr<bool> OptimizerStep(torch::optim::Optimizer& optimizer,
                                     const std::function<void()>& before_step = nullptr);
  // Through the DDP wrapper (buffers from rank 0) in the precision plugin's forward context, as are
  // the three evaluation steps; returns the loss.
  absl::StatusOr<at::Tensor> TrainingStep(const Batch& batch, int64_t batch_index);
  // A resumed fit continues after `optimizer_steps` optimizer steps: where post-local SGD's hook
  // and averager take up their counts (no-op without).
  void ContinueFrom(int64_t optimizer_steps);
  absl::StatusOr<StepMetrics> ValidationStep(const Batch& batch, int64_t batch_index);
  absl::StatusOr<StepMetrics> TestStep(const Batch& batch, int64_t batch_index);
  absl::StatusOr<at::Tensor> PredictStep(const Batch& batch, int64_t batch_index);

  // --- Checkpoints
  // ------------------------------------------------------------------------
  // Rank 0 writes `bytes` (e.g. SerializeCheckpoint's) through the checkpoint IO; the other ranks
  // write nothing. Every rank learns whether it worked, so all return the same status.
  absl::Status SaveCheckpoint(absl::string_view bytes, const std::string& path);
  // The checkpoint's bytes, on the calling rank.
  absl::StatusOr<std::string> LoadCheckpoint(const std::string& path);
  // Rank 0 removes a checkpoint (one already gone is no error); every rank returns the same status,
  // as with SaveCheckpoint.
  absl::Status RemoveCheckpoint(const std::string& path);

 private:
  // Rank 0's `status` on every rank (a collective): the others return an error saying
  // `failed_on_rank_zero` when it failed.
  absl::Status AgreeOnRankZero(absl::Status status, const std::string& failed_on_rank_zero);
  // Launch() under an outer launcher: SetupDistributed(), fn, rank 0's result to every rank,
  // Teardown().
  absl::StatusOr<std::string> RunAsOuterRank(const ClusterInfo& outer, const WorkerFn& fn);
  // fn, with an escaping exception turned into an error.
  absl::StatusOr<std::string> RunCaught(const WorkerFn& fn);
  absl::Status RequireSetup(absl::string_view what) const;
  // SetupDistributed() on `cluster` (GroupOptions::generation: -1, the next).
  absl::Status JoinGroup(const ClusterInfo& cluster, int generation = -1);
  // options_.ddp with the communication hook the options name (and, for post-local SGD, a new
  // post_local_sgd_ whose hook it is).
  absl::StatusOr<DdpOptions> DdpOptionsWithHook();
  // The precision plugin's forward context on this rank's device.
  std::unique_ptr<PrecisionPlugin::StepContext> ForwardContext();
  // The accelerator, parallel_devices and precision fit together.
  absl::Status CheckDevices() const;
  absl::Status CheckRankDevice() const;

  StrategyOptions options_;
  ClusterInfo cluster_;
  bool awaits_elastic_join_ = false;
  std::unique_ptr<ProcessGroup> group_;
  std::shared_ptr<LightningModule> module_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  ShardedModule sharded_;  // full_shard's, instead of ddp_
  // ddp_comm_hook kPostLocalSgd's; borrows group_, so it goes first.
  std::unique_ptr<PostLocalSgd> post_local_sgd_;
  // Launching (the launcher's thread): this node's part of the last job (core/job/node_job.h), kept
  // after a failed Launch() for PrepareRestart(), which makes the next Launch() its next start.
  std::unique_ptr<NodeJob> node_job_;
  bool restart_prepared_ = false;
};

// `body()` (a Status or StatusOr) with every parameter whole under full_shard, on `only_rank` alone
// when it is given (GatherParameters() before, ReleaseParameters() after, even when it fails); just
// `body()` otherwise.
template <typename Body>
auto WithParametersWhole(DDPSpawnStrategy& strategy, Body body, int only_rank = -1)
    -> decltype(body()) {
  if (absl::Status gathered = strategy.GatherParameters(only_rank); !gathered.ok()) {
    return gathered;
  }
  auto result = body();
  absl::Status released = strategy.ReleaseParameters();
  if (result.ok() && !released.ok()) return released;
  return result;
}

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_STRATEGY_DDP_SPAWN_STRATEGY_H_
