// ddpspawn's side of tools/bench: launches 2 ranks (spawned, forked with --start-method fork, or
// forked by a forkserver with --start-method forkserver, started during the launch or, with
// --prestart 1, before it) that train a workload with DistributedDataParallel (or without gradient
// sync: the ceiling), and prints one JSON object: launch to first batch (s, from before the launch
// to rank 0's first finished step), steady steps/s (after a warm-up; the slowest rank's, and each
// rank's), peak RSS per rank (MB, the largest over the ranks). Mode "allreduce" instead times one
// all-reduce of the workload's gradient size (shared memory, or Gloo with DDPSPAWN_SHM_ALLREDUCE=0;
// staged, in place, and in place after each rank wrote its buffer); mode "startup" exits at once
// (tools/bench times what starting a LibTorch process costs); mode "c10d_reducer" trains with
// PyTorch's own c10d::Reducer over Gloo instead of ddpspawn's (steps/s only); mode "post_localsgd"
// trains with post-local SGD from the first step: gradients averaged within each node every step,
// the parameters over every rank every --averaging-period steps (default 4). --device cuda trains
// on cuda:local_rank over NCCL. Usage: ddpspawn_bench --workload mlp|conv|conv_bn|resnet18|gpt
// (bench_models.h)
//            --mode ddp|nosync|lockstep|allreduce|startup|c10d_reducer|post_localsgd
//            [--steps N] [--warmup N] [--nprocs N] [--start-method spawn|fork|forkserver]
//            [--prestart 0|1]
//            [--device cpu|cuda] [--breakdown 0|1] [--timeline 0|1] [--bucket-cap-mb MB]
//            [--optimizer sgd|adam|zero_adam] [--averaging-period N]
//            [--nnodes N --node-rank K --master-addr A --master-port P]
// --breakdown 1 adds each rank's milliseconds per step in zero_grad, forward, backward (with the
// gradient all-reduces) and the optimizer step, and each rank's wait at the shared-memory
// collectives (their arrivals). --timeline 1 adds, per rank and bucket, when its reduction started
// in backward, how long starting it took (a shared-memory sum runs there) and the wait at it
// (bucket_timeline.h). Mode "lockstep" is the no-sync step plus one one-float all-reduce: the
// ceiling of any step that waits for every rank. --bucket-cap-mb sets every bucket's cap (the first
// one's too). --optimizer: SGD (the default), Adam, or Adam sharded by ZeroRedundancyOptimizer; the
// JSON then has each rank's optimizer state bytes ("optimizer_state_bytes", by rank). With --nnodes
// > 1 this is one node's launcher of a job of several nodes (node 0's serves the rendezvous), as
// `ddpspawn fit` runs on each host.
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/comm/process_group.h"
#include "core/ddp/distributed_data_parallel.h"
#include "core/ddp/post_local_sgd.h"
#include "core/ddp/shard_grad_op_optimizer.h"
#include "core/ddp/zero_redundancy_optimizer.h"
#include "core/env/cluster_environment.h"
#include "core/env/settings.h"
#include "core/job/node_rendezvous.h"
#include "core/launch/forkserver.h"
#include "core/launch/launcher.h"
#include "core/launch/worker_channel.h"
#include "core/util/status_macros.h"
#include "core/util/tensor_memory.h"
#include "tools/benchmarks/bench_models.h"
#include "tools/benchmarks/bucket_timeline.h"
#include "torch/csrc/distributed/c10d/FileStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/reducer.hpp"

// When the launch began (seconds since the epoch), for the ranks.
constexpr char kLaunchTimeEnv[] = "DDPSPAWN_BENCH_LAUNCH_TIME";

namespace ddpspawn {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double PeakRssMb() {
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

struct Flags {
  std::string workload = "mlp", mode = "ddp", start_method = "spawn";
  std::string device = "cpu";     // cpu (gloo) or cuda (nccl, cuda:local_rank)
  std::string optimizer = "sgd";  // sgd (lr 0.01), adam (lr 1e-3) or zero_adam
  int steps = 100, warmup = 10, nprocs = 2;
  bool check_calls = true;    // GroupOptions::check_calls
  bool breakdown = false;     // ddp/nosync: time each phase of the step (--breakdown 1)
  bool timeline = false;      // ddp: time each bucket of the step (--timeline 1)
  int averaging_period = 4;   // post_localsgd's model averaging period
  double bucket_cap_mb = 0;   // ddp: 0 keeps the default; else every bucket's cap (--bucket-cap-mb)
  bool grads_to_none = true;  // zero_grad(set_to_none) (--zero-grad-to-none 0: zeroed in place)
  bool prefetch = true;       // full_shard_adam: FullShardOptions::prefetch (--prefetch 0: off)
  double launch_time = 0;
};

// Steps/s of PyTorch's own gradient reducer (c10d::Reducer, what
// torch.nn.parallel.DistributedDataParallel runs, with its default buckets: 1 MB first, 25 MB
// after, rebuilt in gradient order after the first step) over a Gloo group of this launcher's
// ranks, driven from C++ as DDP's forward drives it. What ddpspawn's reducer would be replaced by.
absl::StatusOr<double> C10dReducerStepsPerSecond(const ClusterInfo& cluster,
                                                 const BenchWorkload& net, const Flags& flags) {
  const torch::Tensor& x = net.inputs;
  const torch::Tensor& y = net.targets;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(cluster.run_dir + "/c10d_reducer.store",
                                                      cluster.world_size);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, cluster.rank, cluster.world_size,
                                                            gloo_options);
    auto group = c10::make_intrusive<c10d::ProcessGroup>(store, cluster.rank, cluster.world_size);
    group->setBackend(c10::kCPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    std::vector<at::Tensor> params = net.module->parameters();
    constexpr int64_t kFirstBucket = 1 << 20, kBucket = 25 << 20;
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        params, {kFirstBucket, kBucket}, std::vector<bool>(params.size()));
    std::reverse(buckets.begin(), buckets.end());
    std::reverse(limits.begin(), limits.end());
    c10d::Reducer reducer(params, buckets, group, std::vector<bool>(params.size()), kBucket,
                          /*find_unused_parameters=*/false,
                          /*gradient_as_bucket_view=*/false, {}, kFirstBucket,
                          /*skip_all_reduce_unused_params=*/false,
                          /*use_python_reducer=*/false,
                          std::vector<int64_t>(limits.begin(), limits.end()));
    torch::optim::SGD optimizer(params, 0.01);
    double steady_start = 0;
    for (int step = 0; step < flags.warmup + flags.steps; ++step) {
      if (step == flags.warmup) steady_start = NowSeconds();
      optimizer.zero_grad();
      reducer.rebuild_buckets();
      reducer.prepare_for_forward();
      torch::Tensor loss = torch::cross_entropy_loss(net.forward(x), y);
      reducer.prepare_for_backward({});
      loss.backward();
      optimizer.step();
    }
    return flags.steps / (NowSeconds() - steady_start);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("c10d reducer: ", e.what()));
  }
}

// The optimizer --optimizer names, over the module's parameters (shard_grad_op_adam and
// full_shard_adam: over `ddp`, wrapped with shard_gradients).
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeBenchOptimizer(
    const std::string& name, torch::nn::Module& module, ProcessGroup* group,
    DistributedDataParallel& ddp) {
  std::vector<at::Tensor> parameters = module.parameters();
  if (name == "sgd") return std::make_unique<torch::optim::SGD>(parameters, 0.01);
  auto adam = [parameters]() -> absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> {
    return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(1e-3));
  };
  if (name == "adam") return adam();
  if (name == "zero_adam") {
    ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> sharded,
                     ZeroRedundancyOptimizer::Create(adam, group));
    return sharded;
  }
  if (name == "shard_grad_op_adam" || name == "full_shard_adam") {
    ASSIGN_OR_RETURN(std::unique_ptr<ShardGradOpOptimizer> sharded,
                     ShardGradOpOptimizer::Create(adam, ddp));
    return sharded;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--optimizer ", name, ": sgd|adam|zero_adam|shard_grad_op_adam|full_shard_adam"));
}

absl::StatusOr<std::string> Worker(const Flags& flags) {
  ASSIGN_OR_RETURN(ClusterInfo cluster, DetectClusterEnvironment());
  const bool cuda = flags.device == "cuda";
  GroupOptions group_options;
  group_options.backend = cuda ? Backend::kNccl : Backend::kGloo;
  group_options.check_calls = flags.check_calls;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Create(cluster, group_options);
  if (!group.ok()) return group.status();
  torch::set_num_threads(1);
  torch::manual_seed(0);
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, cluster.local_rank) : torch::kCPU;
  InstallTensorMemoryCounter();
  ResetPeakTensorBytes();
  const int64_t tensor_bytes_before_model = LiveTensorBytes();
  ASSIGN_OR_RETURN(BenchWorkload net, MakeBenchWorkload(flags.workload));
  net.module->to(device);
  int64_t gradient_elements = 0;
  for (const auto& p : net.module->parameters()) gradient_elements += p.numel();
  if (flags.mode == "small_allreduce") {
    // Latency of a one-float all-reduce (a logged loss, a flag): where the cross-rank comparison of
    // the calls weighs most.
    float value = 1.0f;
    const int rounds = flags.steps * 20;
    for (int i = 0; i < flags.warmup + rounds; ++i) {
      if (i == flags.warmup) (void)(*group)->Barrier("timed");
      RETURN_IF_ERROR((*group)->AllReduce(&value, 1, DType::kFloat32, ReduceOp::kMean));
    }
    const double start = NowSeconds();
    for (int i = 0; i < rounds; ++i) {
      RETURN_IF_ERROR((*group)->AllReduce(&value, 1, DType::kFloat32, ReduceOp::kMean));
    }
    return absl::StrFormat("{\"small_allreduce_us\": %.3f}", (NowSeconds() - start) / rounds * 1e6);
  }
  if (flags.mode == "allreduce") {
    // Raw bandwidth for one gradient-sized buffer: a plain tensor (staged through shared memory, or
    // Gloo) and a reduction buffer like DDP's buckets (in place where shared memory is on).
    // `rewrite`: each rank first writes its whole buffer, as DDP's copy of the gradients into their
    // buckets does, so that the sum finds the other rank's lines in the other core's cache (a
    // repeated sum finds its chunk in its own); the time of that write alone is subtracted.
    auto milliseconds_per_sum = [&](at::Tensor buffer, bool rewrite) -> absl::StatusOr<double> {
      buffer.fill_(1);
      for (int i = 0; i < flags.warmup; ++i) (void)(*group)->AllReduce(buffer, ReduceOp::kSum);
      double writing = 0;
      const double start = NowSeconds();
      for (int i = 0; i < flags.steps; ++i) {
        if (rewrite) {
          const double before = NowSeconds();
          buffer.fill_(1);
          writing += NowSeconds() - before;
        }
        RETURN_IF_ERROR((*group)->AllReduce(buffer, ReduceOp::kSum));
      }
      return (NowSeconds() - start - writing) / flags.steps * 1e3;
    };
    at::Tensor plain = torch::ones({gradient_elements});
    ASSIGN_OR_RETURN(double staged, milliseconds_per_sum(plain, false));
    ASSIGN_OR_RETURN(at::Tensor shared, (*group)->NewReductionBuffer(gradient_elements, plain));
    ASSIGN_OR_RETURN(double in_place, milliseconds_per_sum(shared, false));
    ASSIGN_OR_RETURN(double after_write, milliseconds_per_sum(shared, true));
    return absl::StrFormat(
        "{\"allreduce_ms\": %.4f, \"allreduce_in_place_ms\": %.4f, "
        "\"allreduce_in_place_after_write_ms\": %.4f, \"bytes\": %d, \"algbw_gb_per_s\": %.4f}",
        staged, in_place, after_write, gradient_elements * 4, gradient_elements * 4 / staged / 1e6);
  }
  if (flags.mode == "c10d_reducer") {
    ASSIGN_OR_RETURN(double steps_per_s, C10dReducerStepsPerSecond(cluster, net, flags));
    RETURN_IF_ERROR((*group)->AllReduce(&steps_per_s, 1, DType::kFloat64, ReduceOp::kMin));
    return absl::StrFormat("{\"steps_per_s\": %.3f}", steps_per_s);  // the slowest rank's
  }
  DdpOptions ddp_options;
  if (flags.bucket_cap_mb > 0) {
    ddp_options.reducer.bucket_cap_mb = ddp_options.reducer.first_bucket_cap_mb =
        flags.bucket_cap_mb;
  }
  // (FullShard sets it itself.)
  ddp_options.reducer.shard_gradients = flags.optimizer == "shard_grad_op_adam";
  std::unique_ptr<PostLocalSgd> post_local_sgd;
  if (flags.mode == "post_localsgd") {
    PostLocalSgdOptions local;
    local.model_averaging_period = flags.averaging_period;
    ASSIGN_OR_RETURN(post_local_sgd, PostLocalSgd::Create(group->get(), local));
    ddp_options.reducer.comm_hook = post_local_sgd->hook();
  }
  std::shared_ptr<BucketTimeline> timeline;
  if (flags.timeline) {
    timeline = std::make_shared<BucketTimeline>(
        ddp_options.reducer.comm_hook ? ddp_options.reducer.comm_hook : MakeAllReduceHook(),
        group->get());
    ddp_options.reducer.comm_hook = timeline;
  }
  // full_shard_adam: FSDP2's units of the workload, through a FullShard.
  std::unique_ptr<FullShard> full_shard;
  std::unique_ptr<DistributedDataParallel> owned_ddp;
  if (flags.optimizer == "full_shard_adam") {
    if (net.units.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--optimizer full_shard_adam: workload ", flags.workload,
                       " has no full_shard units (mlp and gpt have)"));
    }
    FullShardOptions shard_options;
    shard_options.ddp = ddp_options;
    shard_options.prefetch = flags.prefetch;
    ASSIGN_OR_RETURN(full_shard,
                     FullShard::Wrap(net.module, net.units, group->get(), shard_options));
  } else {
    ASSIGN_OR_RETURN(owned_ddp,
                     DistributedDataParallel::Wrap(net.module, group->get(), ddp_options));
  }
  DistributedDataParallel* const ddp = full_shard ? &full_shard->ddp() : owned_ddp.get();
  ASSIGN_OR_RETURN(std::unique_ptr<torch::optim::Optimizer> made,
                   MakeBenchOptimizer(flags.optimizer, *net.module, group->get(), *ddp));
  torch::optim::Optimizer& optimizer = *made;
  const torch::Tensor x = net.inputs.to(device);
  const torch::Tensor y = net.targets.to(device);
  double first_batch = 0, steady_start = 0;
  // --breakdown: seconds in each phase over the timed steps (the clock is read between phases only
  // then).
  enum Phase { kZeroGrad, kForward, kBackward, kStep, kPhases };
  double phase_seconds[kPhases] = {};
  double mark = 0;
  auto lap = [&](Phase phase, int step) {
    if (!flags.breakdown) return;
    const double now = NowSeconds();
    if (step >= flags.warmup) phase_seconds[phase] += now - mark;
    mark = now;
  };
  ArrivalReport arrivals_at_start;
  for (int step = 0; step < flags.warmup + flags.steps; ++step) {
    if (step == flags.warmup) {
      if (cuda) torch::cuda::synchronize();
      steady_start = NowSeconds();
      arrivals_at_start = (*group)->arrivals();
    }
    if (flags.breakdown) mark = NowSeconds();
    optimizer.zero_grad(flags.grads_to_none);
    lap(kZeroGrad, step);
    RETURN_IF_ERROR(ddp->PrepareForward());
    at::Tensor logits;
    if (full_shard) {
      ASSIGN_OR_RETURN(logits, net.sharded_forward(*full_shard, x));
    } else {
      logits = net.forward(x);
    }
    torch::Tensor loss = torch::cross_entropy_loss(logits, y);
    lap(kForward, step);
    if (timeline) timeline->BeginBackward(step >= flags.warmup);
    if (flags.mode == "nosync" || flags.mode == "lockstep") {
      DistributedDataParallel::NoSync no_sync = ddp->no_sync();
      loss.backward();
    } else {
      loss.backward();
    }
    if (timeline) timeline->EndBackward();
    if (flags.mode == "lockstep") {  // the ranks meet once a step, with no gradient to sum
      float meet = 0;
      RETURN_IF_ERROR((*group)->AllReduce(&meet, 1, DType::kFloat32, ReduceOp::kSum));
    }
    lap(kBackward, step);
    optimizer.step();
    if (post_local_sgd)
      RETURN_IF_ERROR(post_local_sgd->AfterOptimizerStep(net.module->parameters()));
    lap(kStep, step);
    if (step == 0) first_batch = NowSeconds();
  }
  if (cuda) torch::cuda::synchronize();
  // The job moves at its slowest rank's pace: without gradient sync (the ceiling) the ranks drift
  // apart, and rank 0's own rate alone would overstate it.
  const double my_steps_per_s = flags.steps / (NowSeconds() - steady_start);
  const ArrivalReport arrivals = (*group)->arrivals().Since(arrivals_at_start);
  std::vector<double> steps_per_s_by_rank((*group)->world_size());
  RETURN_IF_ERROR(
      (*group)->AllGather(&my_steps_per_s, 1, DType::kFloat64, steps_per_s_by_rank.data()));
  const double steps_per_s =
      *std::min_element(steps_per_s_by_rank.begin(), steps_per_s_by_rank.end());
  double rss = PeakRssMb();
  RETURN_IF_ERROR((*group)->AllReduce(&rss, 1, DType::kFloat64, ReduceOp::kMax));
  std::string breakdown;
  if (flags.optimizer != "sgd") {
    ASSIGN_OR_RETURN(const int64_t mine, OptimizerStateBytes(optimizer));
    std::vector<int64_t> all((*group)->world_size());
    RETURN_IF_ERROR((*group)->AllGather(&mine, 1, DType::kInt64, all.data()));
    absl::StrAppend(&breakdown, ", \"optimizer_state_bytes\": [", absl::StrJoin(all, ", "), "]");
    // The tensor memory each rank held at most, from the model's creation on (tensor_memory.h).
    const int64_t peak = PeakTensorBytes() - tensor_bytes_before_model;
    RETURN_IF_ERROR((*group)->AllGather(&peak, 1, DType::kInt64, all.data()));
    absl::StrAppend(&breakdown, ", \"peak_tensor_bytes\": [", absl::StrJoin(all, ", "), "]");
    // What the model's training keeps between steps (the batch aside), against ZeRO's formula for
    // float32 parameters and Adam's 8 bytes of state an element: DDP 16 an element, ZeRO-1 8 and 8
    // of its shard, shard_grad_op 4 and 12 of its rows, full_shard 16 of its rows.
    optimizer.zero_grad();
    const int64_t kept = SettledLiveTensorBytes() - tensor_bytes_before_model -
                         static_cast<int64_t>(net.inputs.nbytes() + net.targets.nbytes());
    RETURN_IF_ERROR((*group)->AllGather(&kept, 1, DType::kInt64, all.data()));
    absl::StrAppend(&breakdown, ", \"state_tensor_bytes\": [", absl::StrJoin(all, ", "), "]");
    const auto* sharded = dynamic_cast<const ShardedOptimizer*>(&optimizer);
    const int64_t mine_elements =
        sharded != nullptr ? sharded->shard_elements() : gradient_elements;
    const int64_t formula =
        flags.optimizer == "zero_adam"            ? 8 * gradient_elements + 8 * mine_elements
        : flags.optimizer == "shard_grad_op_adam" ? 4 * gradient_elements + 12 * mine_elements
                                                  : 16 * mine_elements;
    RETURN_IF_ERROR((*group)->AllGather(&formula, 1, DType::kInt64, all.data()));
    absl::StrAppend(&breakdown, ", \"state_formula_bytes\": [", absl::StrJoin(all, ", "), "]");
  }
  if (timeline) {
    std::vector<double> mine = timeline->Flatten();
    std::vector<double> all(mine.size() * (*group)->world_size());
    RETURN_IF_ERROR((*group)->AllGather(mine.data(), mine.size(), DType::kFloat64, all.data()));
    absl::StrAppend(&breakdown,
                    ", \"timeline\": ", BucketTimeline::ToJson(all, (*group)->world_size()));
  }
  if (flags.breakdown) {
    // Every rank's phases, in ms per step, and what the arrivals say of the waits at the
    // shared-memory collectives.
    std::vector<double> mine(phase_seconds, phase_seconds + kPhases);
    std::vector<double> all(mine.size() * (*group)->world_size());
    RETURN_IF_ERROR((*group)->AllGather(mine.data(), mine.size(), DType::kFloat64, all.data()));
    absl::StrAppend(&breakdown, ", \"phases_ms\": [");
    for (int r = 0; r < (*group)->world_size(); ++r) {
      const double* p = &all[static_cast<size_t>(r) * kPhases];
      const double per_step = 1e3 / flags.steps;
      absl::StrAppendFormat(&breakdown,
                            "%s{\"zero_grad\": %.3f, \"forward\": %.3f, \"backward\": %.3f, "
                            "\"optimizer_step\": %.3f}",
                            r == 0 ? "" : ", ", p[kZeroGrad] * per_step, p[kForward] * per_step,
                            p[kBackward] * per_step, p[kStep] * per_step);
    }
    absl::StrAppendFormat(&breakdown, "], \"collectives_per_step\": %.2f, \"waited_ms\": [",
                          static_cast<double>(arrivals.collectives) / flags.steps);
    for (size_t r = 0; r < arrivals.ranks.size(); ++r) {
      absl::StrAppendFormat(&breakdown, "%s%.3f", r == 0 ? "" : ", ",
                            1e3 * arrivals.ranks[r].waited_seconds / flags.steps);
    }
    absl::StrAppendFormat(&breakdown, "], \"straggler\": \"%s\"", arrivals.Summary());
  }
  return absl::StrFormat(
      "{\"launch_to_first_batch\": %.4f, \"steps_per_s\": %.3f, \"steps_per_s_by_rank\": [%s], "
      "\"peak_rss_mb\": %.1f%s}",
      first_batch - flags.launch_time, steps_per_s,
      absl::StrJoin(steps_per_s_by_rank, ", ",
                    [](std::string* out, double v) { absl::StrAppendFormat(out, "%.3f", v); }),
      rss, breakdown);
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  ddpspawn::ServeForksIfForkserver();
  ddpspawn::Flags flags;
  bool prestart = false;
  ddpspawn::NodeRendezvousOptions nodes;
  nodes.nnodes = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--workload") flags.workload = value;
    if (key == "--mode") flags.mode = value;
    if (key == "--steps") flags.steps = std::atoi(value.c_str());
    if (key == "--warmup") flags.warmup = std::atoi(value.c_str());
    if (key == "--nprocs") flags.nprocs = std::atoi(value.c_str());
    if (key == "--start-method") flags.start_method = value;
    if (key == "--device") flags.device = value;
    if (key == "--optimizer") flags.optimizer = value;
    if (key == "--averaging-period") flags.averaging_period = std::atoi(value.c_str());
    if (key == "--check-calls") flags.check_calls = value != "0";
    if (key == "--breakdown") flags.breakdown = value != "0";
    if (key == "--timeline") flags.timeline = value != "0";
    if (key == "--zero-grad-to-none") flags.grads_to_none = value != "0";
    if (key == "--prefetch") flags.prefetch = value != "0";
    if (key == "--bucket-cap-mb") (void)absl::SimpleAtod(value, &flags.bucket_cap_mb);
    if (key == "--prestart") prestart = value != "0";
    if (key == "--nnodes") nodes.nnodes = std::atoi(value.c_str());
    if (key == "--node-rank") nodes.node_rank = std::atoi(value.c_str());
    if (key == "--master-addr") nodes.master_addr = value;
    if (key == "--master-port") nodes.master_port = std::atoi(value.c_str());
  }
  // When the launch began: in the environment, so that the forkserver's command line is the same
  // whatever the time.
  if (const char* launched = std::getenv(kLaunchTimeEnv)) {
    (void)absl::SimpleAtod(launched, &flags.launch_time);
  }
  if (flags.mode == "startup") {  // tools/bench times a bare start and reads its own peak
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
      if (absl::StartsWith(line, "VmHWM:")) std::printf("%s\n", line.c_str());
    }
    return 0;
  }
  if (ddpspawn::IsLaunchedWorker()) {
    absl::StatusOr<std::string> report = ddpspawn::Worker(flags);
    if (!report.ok()) {
      (void)ddpspawn::SetWorkerError(report.status().ToString());
      return 1;
    }
    if (std::atoi(std::getenv("RANK")) == 0) (void)ddpspawn::SetWorkerResult(*report);
    return 0;
  }
  ddpspawn::LaunchSpec spec;
  spec.nprocs = flags.nprocs;
  if (flags.start_method == "fork") {
    spec.start_method = ddpspawn::StartMethod::kFork;
    spec.worker = [&flags](int rank) {
      absl::StatusOr<std::string> report = ddpspawn::Worker(flags);
      if (!report.ok()) {
        (void)ddpspawn::SetWorkerError(report.status().ToString());
        return 1;
      }
      if (rank == 0) (void)ddpspawn::SetWorkerResult(*report);
      return 0;
    };
  }
  for (int i = 0; i < argc; ++i) spec.argv.emplace_back(argv[i]);
  if (flags.start_method == "forkserver") {
    spec.start_method = ddpspawn::StartMethod::kForkserver;
    // --prestart 1: the server is up before the launch, as in a process that launches again (a
    // restart, the next fit), or one that started it early.
    if (absl::Status started =
            prestart ? ddpspawn::Job::PrestartForkserver(spec) : absl::OkStatus();
        !started.ok()) {
      std::fprintf(stderr, "%s\n", started.ToString().c_str());
      return 1;
    }
  }
  std::unique_ptr<ddpspawn::NodeRendezvous> rendezvous;
  if (nodes.nnodes > 1) {
    nodes.nprocs_per_node = flags.nprocs;
    nodes.job = absl::StrCat("ddpspawn_bench ", flags.workload, " ", flags.mode);
    absl::StatusOr<std::unique_ptr<ddpspawn::NodeRendezvous>> joined =
        ddpspawn::NodeRendezvous::Join(nodes);
    if (!joined.ok()) {
      std::fprintf(stderr, "%s\n", joined.status().ToString().c_str());
      return 1;
    }
    rendezvous = *std::move(joined);
    spec.nnodes = nodes.nnodes;
    spec.node_rank = nodes.node_rank;
    spec.master_addr = nodes.master_addr;
    spec.master_port = nodes.master_port;
  }
  flags.launch_time = ddpspawn::NowSeconds();  // the launch starts here
  spec.env.push_back(absl::StrFormat("%s=%.6f", kLaunchTimeEnv, flags.launch_time));
  absl::StatusOr<std::unique_ptr<ddpspawn::Job>> job = ddpspawn::Job::Create(spec);
  absl::Status status = job.ok() ? (*job)->Start() : job.status();
  if (status.ok()) status = (*job)->Wait();
  absl::StatusOr<std::string> result =
      status.ok() ? (*job)->result().value_or("") : absl::StatusOr<std::string>(status);
  if (rendezvous != nullptr) {
    std::string unreported;
    if (status.ok()) {
      result = rendezvous->Finish(absl::Seconds(30), *result);
    } else {
      result = rendezvous->ShareFailure(status, absl::Now(), absl::Seconds(10), &unreported);
    }
  }
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", result->c_str());
  return 0;
}
