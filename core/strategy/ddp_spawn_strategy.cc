// DDPSpawnStrategy (see ddp_spawn_strategy.h).
#include "core/strategy/ddp_spawn_strategy.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/comm/cuda/cuda_support.h"
#include "core/ddp/sharded_optimizer.h"
#include "core/ddp/sync_batch_norm.h"
#include "core/ddp/wrap_registry.h"
#include "core/env/settings.h"
#include "core/job/node_job.h"
#include "core/launch/launcher.h"
#include "core/launch/worker_channel.h"
#include "core/util/enum_names.h"
#include "core/util/exception_status.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// This process's own command line, to re-run it as the spawned ranks.
absl::StatusOr<std::vector<std::string>> OwnCommandLine() {
  ASSIGN_OR_RETURN(std::string raw, ReadWholeFile("/proc/self/cmdline"));
  std::vector<std::string> argv = absl::StrSplit(raw, '\0', absl::SkipEmpty());
  if (argv.empty()) return absl::InternalError("/proc/self/cmdline is empty");
  argv[0] = "/proc/self/exe";  // the same binary, whatever the PATH or the
                               // working directory
  return argv;
}

// Lightning's batch_to_device: the batch's tensors on the rank's device.
Batch ToDevice(const Batch& batch, c10::Device device) {
  Batch moved;
  moved.reserve(batch.size());
  for (const at::Tensor& t : batch) {
    moved.push_back(t.defined() && t.device() != device ? t.to(device, /*non_blocking=*/true) : t);
  }
  return moved;
}

}  // namespace

bool IsWorkerProcess() { return IsLaunchedWorker(); }

constexpr NamedValue<Accelerator> kAcceleratorNames[] = {
    {"cpu", Accelerator::kCpu},
    {"cuda", Accelerator::kCuda},
    {"gpu", Accelerator::kCuda},
};

absl::string_view AcceleratorName(Accelerator accelerator) {
  return NameOf(kAcceleratorNames, accelerator);
}

absl::StatusOr<Accelerator> ParseAccelerator(absl::string_view name) {
  return ParseName(kAcceleratorNames, "accelerator", name);
}

DDPSpawnStrategy::DDPSpawnStrategy(StrategyOptions options) : options_(std::move(options)) {
  if (!options_.checkpoint_io) options_.checkpoint_io = MakeAtomicFileCheckpointIO();
  if (!options_.precision_plugin)
    options_.precision_plugin = MakePrecisionPlugin(Precision::k32True);
  if (!options_.cluster_environment) {
    options_.cluster_environment = [] { return DetectClusterEnvironment(); };
  }
}

DDPSpawnStrategy::~DDPSpawnStrategy() {
  if (group_ != nullptr)
    SetGroupWrapRules(group_.get(), {});  // a later group may reuse the address
}

c10::Device DDPSpawnStrategy::root_device() const {
  if (cluster_.local_rank >= 0 && cluster_.local_rank < num_processes()) {
    return options_.parallel_devices[cluster_.local_rank];
  }
  return c10::Device(options_.accelerator == Accelerator::kCuda ? c10::kCUDA : c10::kCPU);
}

absl::Status DDPSpawnStrategy::CheckDevices() const {
  if (options_.parallel_devices.empty()) {
    return absl::InvalidArgumentError("parallel_devices is empty");
  }
  const c10::DeviceType want = options_.accelerator == Accelerator::kCuda ? c10::kCUDA : c10::kCPU;
  for (const c10::Device& device : options_.parallel_devices) {
    if (device.type() != want || (device.is_cuda() && !device.has_index())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "accelerator '", AcceleratorName(options_.accelerator), "' needs parallel_devices of ",
          want == c10::kCUDA ? "indexed CUDA devices (cuda:N)" : "the CPU", "; got ",
          device.str()));
    }
  }
  if (!options_.precision_plugin->SupportsDevice(want == c10::kCUDA)) {
    return absl::UnavailableError(absl::StrCat(
        "precision '", options_.precision_plugin->name(),
        "' needs CUDA devices (float16 autocast with a loss scaler); on the CPU use 'bf16-mixed'"));
  }
  return absl::OkStatus();
}

// In a rank, after the cluster environment is read: this rank's device exists.
absl::Status DDPSpawnStrategy::CheckRankDevice() const {
  if (cluster_.local_rank >= num_processes()) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", cluster_.local_rank,
                                                   " has no device in ", "parallel_devices (",
                                                   num_processes(), " devices)"));
  }
  const c10::Device device = root_device();
  if (!device.is_cuda()) return absl::OkStatus();
  // Loads CUDA into this rank before anything touches the device.
  absl::StatusOr<const CudaSupport*> cuda = LoadCudaSupport();
  if (!cuda.ok()) {
    return absl::UnavailableError(absl::StrCat("rank ", cluster_.rank, " needs ", device.str(),
                                               ": ", cuda.status().message()));
  }
  const int present = (*cuda)->DeviceCount();
  if (present == 0) {
    return absl::UnavailableError(absl::StrCat("rank ", cluster_.rank, " needs ", device.str(),
                                               ", and no CUDA device is present on this machine "
                                               "(CUDA reports 0 devices); use accelerator 'cpu'"));
  }
  if (device.index() >= present) {
    return absl::UnavailableError(absl::StrCat("rank ", cluster_.rank, " needs ", device.str(),
                                               ", and this machine ", "has ", present,
                                               " CUDA device", present == 1 ? "" : "s"));
  }
  return absl::OkStatus();
}

Backend DDPSpawnStrategy::process_group_backend() const {
  if (options_.process_group_backend.has_value()) return *options_.process_group_backend;
  return root_device().is_cuda() ? Backend::kNccl : Backend::kGloo;
}

absl::StatusOr<std::string> DDPSpawnStrategy::Launch(const WorkerFn& fn) {
  ASSIGN_OR_RETURN(ClusterInfo outer, options_.cluster_environment());
  if (CreatesProcessesExternally(outer)) {
    node_job_.reset();
    return RunAsOuterRank(outer, fn);
  }
  // A new job, unless PrepareRestart() made this the next start of the last.
  if (!restart_prepared_) node_job_.reset();
  restart_prepared_ = false;
  RETURN_IF_ERROR(CheckDevices());
  if (node_job_ == nullptr) {
    NodeJobOptions node;
    node.nnodes = options_.num_nodes;
    node.node_rank = options_.node_rank;
    node.master_addr = options_.master_addr;
    node.master_port = options_.master_port;
    node.description = options_.job_description;
    node.rendezvous_timeout = options_.timeout;
    ASSIGN_OR_RETURN(node_job_, NodeJob::Create(std::move(node)));
  }
  LaunchSpec spec;
  spec.nprocs = num_processes();
  spec.env = options_.worker_env;
  spec.start_method = options_.start_method;
  spec.timeout = options_.launch_timeout;
  spec.min_ranks = options_.min_ranks;
  spec.max_replacements = options_.max_replacements;
  if (options_.start_method != StartMethod::kFork) {  // spawn, forkserver: this program again
    ASSIGN_OR_RETURN(spec.argv, OwnCommandLine());
  } else {
    spec.worker = [this, &fn](int) { return RunWorker(fn); };
    spec.fork_close_descriptors = options_.fork_close_descriptors;
  }
  // A spec that Prepare() refuses fails Start(), which tells the other nodes.
  (void)node_job_->Prepare(std::move(spec));
  RETURN_IF_ERROR(node_job_->Run());
  return node_job_->result().value_or("");
}

int DDPSpawnStrategy::last_failed_rank() const {
  return node_job_ == nullptr ? -1 : node_job_->failed_rank();
}

const std::vector<RankOutcome>& DDPSpawnStrategy::last_outcomes() const {
  static const std::vector<RankOutcome>* const kNone = new std::vector<RankOutcome>();
  return node_job_ == nullptr ? *kNone : node_job_->outcomes();
}

absl::StatusOr<std::string> DDPSpawnStrategy::PrepareRestart(const std::string& resume_from) {
  if (node_job_ == nullptr) {
    return absl::FailedPreconditionError("no launch failed, so there is nothing to restart");
  }
  absl::StatusOr<std::string> agreed = node_job_->PrepareRestart(resume_from);
  restart_prepared_ = agreed.ok();
  return agreed;
}

void DDPSpawnStrategy::DeclineRestart(const std::string& why) {
  // The job's outcomes stay for last_outcomes(); the next Launch() is a new job.
  if (node_job_ != nullptr) node_job_->DeclineRestart(why);
  restart_prepared_ = false;
}

// This process is one rank of a job that torchrun, srun or the user started: it runs fn itself. A
// mismatch between the job and these options is refused rather than trained around.
absl::StatusOr<std::string> DDPSpawnStrategy::RunAsOuterRank(const ClusterInfo& outer,
                                                             const WorkerFn& fn) {
  if (outer.local_world_size != num_processes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this process is rank ", outer.rank, " of a ", ClusterKindName(outer.kind), " job with ",
        outer.local_world_size, " processes on this node (LOCAL_WORLD_SIZE), but ", num_processes(),
        " devices/processes per node were asked for; give the same number to both (or leave "
        "nproc_per_node out)"));
  }
  if (absl::Status s = SetupDistributed(); !s.ok()) {
    (void)Teardown();
    return s;
  }
  absl::StatusOr<std::string> result = RunCaught(fn);
  // Every rank returns rank 0's result, as a spawned job's caller gets it.
  if (result.ok()) result = group_->BroadcastBytes(*result, 0);
  absl::Status torn_down = Teardown();
  if (!result.ok()) return result.status();
  if (!torn_down.ok()) return torn_down;
  return result;
}

absl::StatusOr<std::string> DDPSpawnStrategy::RunCaught(const WorkerFn& fn) {
  try {
    return fn(*this);
  } catch (const std::exception& e) {  // LibTorch's: its message, not its backtrace
    return ExceptionStatus("uncaught exception", e);
  }
}

int DDPSpawnStrategy::RunWorker(const WorkerFn& fn) {
  InstallTerminateHandler();
  absl::StatusOr<std::string> result = absl::UnknownError("not run");
  absl::Status status = SetupDistributed();
  if (status.ok()) {
    result = RunCaught(fn);
    status = result.status();
  }
  if (status.ok() && is_global_zero()) status = SetWorkerResult(*result);
  if (!status.ok()) {
    (void)SetWorkerError(status.ToString());
    return 1;
  }
  return Teardown().ok() ? 0 : 1;
}

absl::Status DDPSpawnStrategy::SetupDistributed() {
  ASSIGN_OR_RETURN(ClusterInfo cluster, options_.cluster_environment());
  if (cluster.kind == ClusterKind::kDdpspawn && ReadSetting(Setting::kElasticJoin) == "1") {
    cluster_ = cluster;
    awaits_elastic_join_ = true;
    return absl::OkStatus();
  }
  return JoinGroup(cluster);
}

absl::Status DDPSpawnStrategy::Rejoin(const ClusterInfo& cluster, int generation) {
  RETURN_IF_ERROR(Teardown());
  module_.reset();
  return JoinGroup(cluster, generation);
}

absl::Status DDPSpawnStrategy::JoinGroup(const ClusterInfo& cluster, int generation) {
  cluster_ = cluster;
  awaits_elastic_join_ = false;
  RETURN_IF_ERROR(CheckDevices());
  RETURN_IF_ERROR(CheckRankDevice());
  GroupOptions group_options;
  group_options.backend = process_group_backend();
  group_options.timeout = options_.timeout;
  group_options.generation = generation;
  // NOLINTNEXTLINE(bugprone-signed-char-misuse): a device index is a small signed number.
  if (root_device().is_cuda()) group_options.device_index = root_device().index();
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Create(cluster_, group_options);
  if (!group.ok()) return group.status();
  group_ = *std::move(group);
  // An own loop's DistributedDataParallel over this group refuses BatchNorm layers that
  // sync_batchnorm should have converted (Distribute(model, strategy) converts them).
  SetGroupWrapRules(group_.get(), {options_.sync_batchnorm});
  return absl::OkStatus();
}

absl::Status DDPSpawnStrategy::RequireSetup(absl::string_view what) const {
  if ((ddp_ == nullptr && sharded_.shard == nullptr) || module_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(what, " needs Setup(module) first"));
  }
  return absl::OkStatus();
}

absl::Status DDPSpawnStrategy::ModelToDevice() {
  if (module_ == nullptr) {
    return absl::FailedPreconditionError("ModelToDevice needs a module");
  }
  return module_->To(root_device());
}

absl::Status DDPSpawnStrategy::Setup(std::shared_ptr<LightningModule> module) {
  if (group_ == nullptr) {
    return absl::FailedPreconditionError("Setup(module) needs SetupDistributed() first");
  }
  if (module == nullptr) return absl::InvalidArgumentError("Setup needs a module");
  module_ = std::move(module);
  auto* network = dynamic_cast<NnModule*>(module_.get());
  if (options_.sync_batchnorm) RETURN_IF_ERROR(ApplySyncBatchNorm(*module_));
  RETURN_IF_ERROR(ModelToDevice());
  if (network != nullptr) {  // every SyncBatchNorm normalizes over the group
    for (const std::shared_ptr<torch::nn::Module>& child : network->network()->modules()) {
      if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(child)) {
        sync->set_process_group(group_.get());
      }
    }
  }
  ASSIGN_OR_RETURN(DdpOptions ddp_options, DdpOptionsWithHook());
  if (options_.sharding_strategy == ShardingStrategy::kFullShard) {
    FullShardOptions shard_options;
    shard_options.ddp = ddp_options;
    shard_options.reshard_after_forward = options_.reshard_after_forward;
    shard_options.prefetch = options_.full_shard_prefetch;
    ASSIGN_OR_RETURN(sharded_, ShardModule(*module_, group_.get(), shard_options,
                                           options_.auto_wrap_min_params));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                   DistributedDataParallel::Wrap(module_->parameters(), module_->buffers(),
                                                 group_.get(), ddp_options));
  ddp_ = std::move(ddp);
  return absl::OkStatus();
}

DistributedDataParallel* DDPSpawnStrategy::model() {
  return sharded_.shard != nullptr ? &sharded_.shard->ddp() : ddp_.get();
}

absl::Status DDPSpawnStrategy::GatherParameters(int only_rank) {
  return sharded_.shard != nullptr ? sharded_.shard->GatherAll(only_rank) : absl::OkStatus();
}

absl::Status DDPSpawnStrategy::ReleaseParameters() {
  return sharded_.shard != nullptr ? sharded_.shard->ReshardAll() : absl::OkStatus();
}

namespace {

// sync_batchnorm on `network`: its BatchNorm layers converted; InvalidArgument where the option
// would change nothing (neither a BatchNorm nor a SyncBatchNorm layer).
absl::Status ConvertForSyncBatchNorm(const std::shared_ptr<torch::nn::Module>& network) {
  ASSIGN_OR_RETURN(const int converted, ConvertSyncBatchNorm(network));
  if (converted > 0) return absl::OkStatus();
  // Declared by the model (or converted by an earlier Setup): they normalize over the group.
  // (modules(include_self=false): a module held by value cannot be listed with itself.)
  if (dynamic_cast<SyncBatchNormImpl*>(network.get()) != nullptr) return absl::OkStatus();
  for (const std::shared_ptr<torch::nn::Module>& child : network->modules(false)) {
    if (std::dynamic_pointer_cast<SyncBatchNormImpl>(child) != nullptr) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "sync_batchnorm: the model has no BatchNorm layer to convert (in a Sequential container), "
      "so the option would change nothing: leave it out");
}

}  // namespace

absl::StatusOr<DdpOptions> DDPSpawnStrategy::DdpOptionsWithHook() {
  DdpOptions ddp_options = options_.ddp;
  std::shared_ptr<CommHook> hook = options_.ddp_comm_hook_object;
  post_local_sgd_.reset();
  const bool post_local = options_.ddp_comm_hook == CommHookKind::kPostLocalSgd;
  if (options_.post_localsgd.model_averaging_period > 0 && (hook != nullptr || !post_local)) {
    return absl::InvalidArgumentError(
        hook != nullptr
            ? "model_averaging_period is post-local SGD's, and ddp_comm_hook_object replaces "
              "its hook: leave one of them out"
            : "model_averaging_period is post-local SGD's: it needs ddp_comm_hook post_localsgd");
  }
  if (hook == nullptr && post_local) {
    if (options_.precision_plugin->grad_scaler() != nullptr) {
      return absl::InvalidArgumentError(
          "16-mixed with ddp_comm_hook post_localsgd is not supported yet: the loss scaler "
          "skips a step by this rank's gradients, which local SGD does not share, so the ranks "
          "would skip different steps");
    }
    if (options_.ddp_comm_wrapper != CommWrapper::kNone &&
        options_.post_localsgd.gradient_allreduce_within_node &&
        group_->cluster().local_world_size != group_->world_size()) {
      return absl::InvalidArgumentError(
          "ddp_comm_wrapper with post_localsgd's gradient mean within each of several nodes: "
          "the node's shared memory sums float32 and float64 buckets only; leave the wrapper "
          "out, or set post_local_gradient_allreduce=false");
    }
    ASSIGN_OR_RETURN(post_local_sgd_, PostLocalSgd::Create(group_.get(), options_.post_localsgd));
    hook = post_local_sgd_->hook();
  } else if (hook == nullptr && IsPowerSgd(options_.ddp_comm_hook) && options_.ddp_comm_state) {
    hook = MakePowerSgdHook(options_.ddp_comm_state);
  } else if (hook == nullptr) {
    ASSIGN_OR_RETURN(hook, MakeCommHook(options_.ddp_comm_hook));
  }
  if (options_.ddp_comm_wrapper != CommWrapper::kNone) {
    ASSIGN_OR_RETURN(
        hook,
        MakeCompressWrapper(
            options_.ddp_comm_wrapper == CommWrapper::kFp16 ? at::kHalf : at::kBFloat16, hook));
  }
  ddp_options.reducer.comm_hook = hook;
  ddp_options.reducer.shard_gradients =
      options_.sharding_strategy == ShardingStrategy::kShardGradOp;
  return ddp_options;
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DDPSpawnStrategy::WrapModule(
    torch::nn::Module& module, std::shared_ptr<torch::nn::Module> owner) {
  if (group_ == nullptr) {
    return absl::FailedPreconditionError(
        "Distribute(model, strategy) needs the process group: call it in a rank, inside the "
        "function that Launch() or RunWorker() runs");
  }
  if (owner != nullptr && owner.get() != &module) {
    return absl::InvalidArgumentError("WrapModule: `owner` must hold `module`");
  }
  if (options_.sharding_strategy == ShardingStrategy::kFullShard) {
    return absl::InvalidArgumentError(
        "Distribute(model, strategy) with sharding_strategy full_shard: an own loop's forward "
        "must run each unit through the wrapper, so wrap it with FullShard::Wrap(module, units, "
        "strategy.group()) instead (docs/sharding.md)");
  }
  RETURN_IF_ERROR(CheckNotWrapped(module));  // before converting or moving anything
  if (options_.sync_batchnorm) {
    // A non-owning alias: ConvertSyncBatchNorm replaces children, never the module itself.
    RETURN_IF_ERROR(ConvertForSyncBatchNorm(
        std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &module)));
  }
  {
    c10::NoGradGuard no_grad;
    module.to(root_device());
  }
  ASSIGN_OR_RETURN(DdpOptions ddp_options, DdpOptionsWithHook());
  if (owner != nullptr)
    return DistributedDataParallel::Wrap(std::move(owner), group_.get(), ddp_options);
  return DistributedDataParallel::Wrap(module, group_.get(), ddp_options);
}

absl::Status ApplySyncBatchNorm(LightningModule& module) {
  auto* network = dynamic_cast<NnModule*>(&module);
  if (network == nullptr) {
    return absl::InvalidArgumentError(
        "sync_batchnorm converts the BatchNorm layers of LibTorch nn::Module models; this is a "
        "TorchScript model, whose layers ddpspawn cannot replace (and torch.nn.SyncBatchNorm "
        "cannot be scripted), so its BatchNorm layers would keep each rank's own statistics: "
        "leave sync_batchnorm out");
  }
  return ConvertForSyncBatchNorm(network->network());
}

absl::Status DDPSpawnStrategy::Teardown() {
  ddp_.reset();
  if (sharded_.shard != nullptr && module_ != nullptr) module_->UseFullShard(nullptr);
  sharded_ = {};
  post_local_sgd_.reset();  // borrows the group
  if (group_ != nullptr) SetGroupWrapRules(group_.get(), {});
  group_.reset();
  return absl::OkStatus();
}

absl::Status DDPSpawnStrategy::PreBackward(const at::Tensor& loss) {
  if (!loss.defined()) return absl::InvalidArgumentError("PreBackward got an undefined loss");
  return RequireSetup("PreBackward");
}

absl::Status DDPSpawnStrategy::Backward(const at::Tensor& loss) {
  RETURN_IF_ERROR(PreBackward(loss));
  GradScaler* scaler = options_.precision_plugin->grad_scaler();
  try {
    (scaler != nullptr ? scaler->Scale(loss) : loss).backward();
  } catch (const std::exception& e) {
    return ExceptionStatus("backward failed", e);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DDPSpawnStrategy::OptimizerStep(torch::optim::Optimizer& optimizer,
                                                     const std::function<void()>& before_step) {
  RETURN_IF_ERROR(RequireSetup("OptimizerStep"));
  GradScaler* scaler = options_.precision_plugin->grad_scaler();
  bool stepped = true;
  if (scaler != nullptr) {
    // A sharded optimizer's gradients are its rows: each rank sees a shard, so the ranks agree on
    // skipping by the minimum over them.
    auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer);
    bool finite = scaler->Unscale(sharded != nullptr ? sharded->StepGradientHolders()
                                                     : AllParameters(optimizer));
    if (sharded != nullptr && sharded->gradient_shard_group() != nullptr) {
      float all_finite = finite ? 1.0F : 0.0F;
      RETURN_IF_ERROR(sharded->gradient_shard_group()->AllReduce(&all_finite, 1, DType::kFloat32,
                                                                 ReduceOp::kMin));
      finite = all_finite == 1.0F;
    }
    scaler->Update(!finite);
    stepped = finite;
  }
  if (stepped) {
    if (before_step) before_step();
    optimizer.step();
  }
  if (post_local_sgd_ != nullptr) {
    std::vector<at::Tensor> with_gradients;  // what torch's averager averages
    for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
      for (const at::Tensor& p : group.params()) {
        if (p.grad().defined()) with_gradients.push_back(p);
      }
    }
    RETURN_IF_ERROR(post_local_sgd_->AfterOptimizerStep(with_gradients));
  }
  return stepped;
}

void DDPSpawnStrategy::ContinueFrom(int64_t optimizer_steps) {
  if (post_local_sgd_ != nullptr) post_local_sgd_->ContinueFrom(optimizer_steps);
}

absl::StatusOr<at::Tensor> DDPSpawnStrategy::TrainingStep(const Batch& batch, int64_t batch_index) {
  RETURN_IF_ERROR(RequireSetup("TrainingStep"));
  std::unique_ptr<PrecisionPlugin::StepContext> precision = ForwardContext();
  RETURN_IF_ERROR(model()->PrepareForward());
  if (sharded_.shard != nullptr) {
    return sharded_.TrainingStep(*module_, ToDevice(batch, root_device()), batch_index);
  }
  return module_->TrainingStep(ToDevice(batch, root_device()), batch_index);
}

// No buffer broadcast in evaluation: PrepareForward does nothing under no-grad, as DDP's forward in
// eval.
absl::StatusOr<StepMetrics> DDPSpawnStrategy::ValidationStep(const Batch& batch,
                                                             int64_t batch_index) {
  RETURN_IF_ERROR(RequireSetup("ValidationStep"));
  c10::NoGradGuard no_grad;
  std::unique_ptr<PrecisionPlugin::StepContext> precision = ForwardContext();
  return module_->ValidationStep(ToDevice(batch, root_device()), batch_index);
}

absl::StatusOr<StepMetrics> DDPSpawnStrategy::TestStep(const Batch& batch, int64_t batch_index) {
  RETURN_IF_ERROR(RequireSetup("TestStep"));
  c10::NoGradGuard no_grad;
  std::unique_ptr<PrecisionPlugin::StepContext> precision = ForwardContext();
  return module_->TestStep(ToDevice(batch, root_device()), batch_index);
}

absl::StatusOr<at::Tensor> DDPSpawnStrategy::PredictStep(const Batch& batch, int64_t batch_index) {
  RETURN_IF_ERROR(RequireSetup("PredictStep"));
  c10::NoGradGuard no_grad;
  std::unique_ptr<PrecisionPlugin::StepContext> precision = ForwardContext();
  return module_->PredictStep(ToDevice(batch, root_device()), batch_index);
}

std::unique_ptr<PrecisionPlugin::StepContext> DDPSpawnStrategy::ForwardContext() {
  return options_.precision_plugin->ForwardContext(root_device().is_cuda());
}

absl::Status DDPSpawnStrategy::SaveCheckpoint(absl::string_view bytes, const std::string& path) {
  return AgreeOnRankZero(
      is_global_zero() ? options_.checkpoint_io->Save(bytes, path) : absl::OkStatus(),
      absl::StrCat("rank 0 could not save the checkpoint ", path));
}

absl::Status DDPSpawnStrategy::RemoveCheckpoint(const std::string& path) {
  return AgreeOnRankZero(is_global_zero() ? options_.checkpoint_io->Remove(path) : absl::OkStatus(),
                         absl::StrCat("rank 0 could not remove the checkpoint ", path));
}

absl::Status DDPSpawnStrategy::AgreeOnRankZero(absl::Status status,
                                               const std::string& failed_on_rank_zero) {
  if (group_ != nullptr && world_size() > 1) {  // every rank learns whether rank 0 succeeded
    int64_t ok = status.ok() ? 1 : 0;
    RETURN_IF_ERROR(group_->Broadcast(&ok, 1, DType::kInt64, 0));
    if (ok == 0 && status.ok()) return absl::InternalError(failed_on_rank_zero);
  }
  return status;
}

absl::StatusOr<std::string> DDPSpawnStrategy::LoadCheckpoint(const std::string& path) {
  return options_.checkpoint_io->Load(path);
}

}  // namespace ddpspawn
