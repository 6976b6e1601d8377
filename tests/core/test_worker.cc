// The worker program the core tests launch (spawn start method), one behaviour per mode:
// - ok: rank 0 hands "result from rank 0 of N" back.
// - throw <rank>: that rank throws a C++ exception after joining the group.
// - exit <rank> <code>: that rank exits with the code.
// - signal <rank> <sig>: that rank raises the signal (11: SIGSEGV, 9: SIGKILL).
// - slow_exit <rank>: that rank reports a failure, then takes 500 ms to exit (code 1, ignoring
//   SIGTERM), as a rank whose exit is slow (its threads ending, a sanitizer's checks); the others
//   report that they saw it fail once its report is there, and exit with code 1 at once.
// - report_and_hang <rank>: as slow_exit, but that rank never exits (a rank whose exit hangs) and
//   keeps SIGTERM's default action: the launcher's stop ends it.
// - hang [<rank>]: that rank (or every rank) sleeps forever.
// - ignore_term <rank>: that rank ignores SIGTERM; once every rank is ready (a file each in the run
//   directory), the last rank exits with code 3 and the others sleep forever.
// - hang_with_child <pid-file>: forks a child that sleeps forever, writes its pid to
//   <pid-file>.child<RANK>, and sleeps forever.
// - groups_in_turn: joins three groups one after another.
// - mismatch <how>: ranks 0 and 1 call different collectives.
// - stall <rank> [<timeout_s>]: that rank stops itself (SIGSTOP) between two collectives.
// - collectives: checks every collective, op and dtype against expected values (under any launcher:
//   ddpspawn's, torchrun, several nodes); prints "collectives ok on rank R of N (shared
//   memory|gloo)".
// - launch <method> <pid-file>: is itself a launcher: starts 2 ranks (spawn, fork or forkserver)
//   that each fork a sleeping child (hang_with_child; in fork mode the same in the forked rank),
//   writes the ranks' pids to <pid-file>, and waits.
// - parent: rank 0 hands back "parent <its parent's pid>".
// - descriptors: rank 0 hands back its open descriptors ("0 1 2").
// - elastic <rank>: for a worker of torchrun: joins the group and all-reduces; on the first attempt
//   (TORCHELASTIC_RESTART_COUNT 0) that rank then exits with code 5, so that its peers fail and
//   torchrun restarts them all; later attempts all-reduce again and print "attempt A rank R sum S".
// - fork_after_parallel: runs 2-thread ATen/OpenMP work on this thread, then launches 2 forked
//   ranks (its own launcher) that do the same; hands back "forked ranks ran 2-thread work", or
//   fails with the inner job's error.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/comm/process_group.h"
#include "core/env/cluster_environment.h"
#include "core/env/run_dir.h"
#include "core/job/node_rendezvous.h"
#include "core/launch/forkserver.h"
#include "core/launch/launcher.h"
#include "core/launch/worker_channel.h"
#include "tests/testing/worker_checks.h"

namespace ddpspawn {

const char test_worker::kWorkerName[] = "test_worker";

namespace {

using test_worker::CheckOk;
using test_worker::Fail;
using test_worker::JoinGlooGroup;

void Check(bool ok, const std::string& what) {
  if (!ok) Fail(absl::StrCat("check failed: ", what));
}

[[noreturn]] void SleepForever() {
  while (true) pause();
}

// Expected value of `op` over ranks whose values are rank + 1 (as T).
template <typename T>
T Expected(ReduceOp op, int world) {
  T sum = 0, product = 1;
  for (int r = 0; r < world; ++r) {
    sum += static_cast<T>(r + 1);
    product *= static_cast<T>(r + 1);
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMean:
      if constexpr (std::is_integral<T>::value) {
        return static_cast<T>(static_cast<int64_t>(sum) / world);
      } else {
        return sum / world;
      }
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return static_cast<T>(world);
    case ReduceOp::kProduct:
      return product;
  }
  return 0;
}

template <typename T>
void CheckReductions(ProcessGroup& group, DType dtype, const char* name) {
  const int rank = group.rank(), world = group.world_size();
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::string what = absl::StrCat(name, " op ", static_cast<int>(op));
    T values[5];
    for (T& v : values) v = static_cast<T>(rank) + 1;
    CheckOk(group.AllReduce(values, 5, dtype, op), "all_reduce " + what);
    for (T v : values) Check(v == Expected<T>(op, world), "all_reduce value " + what);
    const int dst = world - 1;
    for (T& v : values) v = static_cast<T>(rank) + 1;
    CheckOk(group.Reduce(values, 5, dtype, op, dst), "reduce " + what);
    T want = rank == dst ? Expected<T>(op, world) : static_cast<T>(rank + 1);
    for (T v : values) Check(v == want, "reduce value " + what);
  }
  T mine[2] = {static_cast<T>(rank), static_cast<T>(-rank)};
  std::vector<T> all(2 * world);
  CheckOk(group.AllGather(mine, 2, dtype, all.data()), absl::StrCat("all_gather ", name));
  for (int r = 0; r < world; ++r) {
    Check(all[2 * r] == static_cast<T>(r) && all[2 * r + 1] == static_cast<T>(-r),
          absl::StrCat("all_gather value ", name));
  }
  T shared[3] = {static_cast<T>(rank * 7), 0, 0};
  CheckOk(group.Broadcast(shared, 3, dtype, 1), absl::StrCat("broadcast ", name));
  Check(shared[0] == static_cast<T>(7), absl::StrCat("broadcast value ", name));
}

void Collectives() {
  std::unique_ptr<ProcessGroup> group = JoinGlooGroup();
  const int rank = group->rank(), world = group->world_size();
  CheckOk(group->Barrier("start"), "barrier");
  // Shared memory: for the ranks of ddpspawn launchers (not torchrun's), all of the job's on one
  // node, or each node's where several nodes have several ranks each, unless
  // DDPSPAWN_SHM_ALLREDUCE=0 (on any node: a test that sets it on one node only says what to expect
  // in TEST_EXPECT_SHARED_MEMORY).
  const char* shm_setting = std::getenv("DDPSPAWN_SHM_ALLREDUCE");
  const char* expected = std::getenv("TEST_EXPECT_SHARED_MEMORY");
  const ClusterInfo& cluster = group->cluster();
  const bool launchers = cluster.kind == ClusterKind::kDdpspawn && cluster.local_world_size > 1;
  Check(group->uses_shared_memory() ==
            (expected != nullptr
                 ? std::string(expected) == "1"
                 : launchers && (shm_setting == nullptr || std::string(shm_setting) != "0")),
        "shared memory in use exactly for launchers' ranks without DDPSPAWN_SHM_ALLREDUCE=0");
  CheckReductions<float>(*group, DType::kFloat32, "float32");
  CheckReductions<double>(*group, DType::kFloat64, "float64");
  CheckReductions<int32_t>(*group, DType::kInt32, "int32");
  CheckReductions<int64_t>(*group, DType::kInt64, "int64");

  // Tensors: a 2-D all-reduce mean, and an all-gather of tensors.
  at::Tensor t = at::full({2, 3}, static_cast<double>(rank), at::kDouble);
  CheckOk(group->AllReduce(t, ReduceOp::kMean), "tensor all_reduce");
  Check(at::allclose(t, at::full({2, 3}, (world - 1) / 2.0, at::kDouble)), "tensor mean");
  absl::StatusOr<std::vector<at::Tensor>> gathered =
      group->AllGather(at::arange(3, at::kLong) + 10 * rank);
  CheckOk(gathered.status(), "tensor all_gather");
  for (int r = 0; r < world; ++r) {
    Check((*gathered)[r].equal(at::arange(3, at::kLong) + 10 * r), "tensor all_gather value");
  }

  // Large float buffers, element by element (the shared-memory all-reduce splits them into one
  // chunk per rank): a plain tensor (staged through shared memory) and a reduction buffer (summed
  // in place), three times each.
  const int64_t n = 100003;  // not a multiple of any chunk size
  at::Tensor index = at::arange(n, at::kFloat);
  at::Tensor expected_sum = index * world + 1000.0 * world * (world - 1) / 2;
  absl::StatusOr<at::Tensor> buffer = group->NewReductionBuffer(n, index);
  CheckOk(buffer.status(), "reduction buffer");
  at::Tensor in_place = *buffer;
  Check(in_place.numel() == n && in_place.eq(0).all().item<bool>(),
        "reduction buffer starts zeroed");
  // Every rank has mapped the segments: their names are gone from /dev/shm (rank 0 removes them
  // before it reaches the barrier).
  CheckOk(group->Barrier("mapped"), "barrier");
  const std::string prefix = SharedMemoryPrefix(group->cluster().run_dir);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (!launchers) break;
    Check(!absl::StartsWith(entry.path().filename().string(), prefix),
          absl::StrCat("no segment name left in /dev/shm: ", entry.path().string()));
  }
  for (int round = 0; round < 3; ++round) {
    at::Tensor staged = index + 1000.0 * rank;
    CheckOk(group->AllReduce(staged, ReduceOp::kSum), "large all_reduce");
    Check(staged.equal(expected_sum), "large all_reduce value");
    in_place.copy_(index + 1000.0 * rank);
    CheckOk(group->AllReduce(in_place, ReduceOp::kMean), "reduction buffer all_reduce");
    Check(in_place.equal(expected_sum / world), "reduction buffer all_reduce value");
  }

  // As DDP's reducer does: two buckets started, a synchronous all-reduce in between, then waited
  // for in order; floats whose sums depend on their order, so every rank must hold the same bits
  // (compared through an all-gather), close to the sum in double precision.
  {
    at::Tensor first_values = at::sin(at::arange(n, at::kFloat) * (0.37 * (rank + 1)));
    at::Tensor second_values = at::cos(at::arange(7, at::kFloat) * (1.3 * (rank + 1)));
    absl::StatusOr<at::Tensor> first = group->NewReductionBuffer(n, index);
    absl::StatusOr<at::Tensor> second = group->NewReductionBuffer(7, index);
    CheckOk(first.status(), "bucket");
    CheckOk(second.status(), "bucket");
    first->copy_(first_values);
    second->copy_(second_values);
    absl::StatusOr<std::unique_ptr<PendingWork>> first_sum =
        group->StartAllReduce(*first, ReduceOp::kMean);
    CheckOk(first_sum.status(), "start bucket 1");
    absl::StatusOr<std::unique_ptr<PendingWork>> second_sum =
        group->StartAllReduce(*second, ReduceOp::kSum);
    CheckOk(second_sum.status(), "start bucket 2");
    float used = 1.0f;
    CheckOk(group->AllReduce(&used, 1, DType::kFloat32, ReduceOp::kSum), "all_reduce in between");
    Check(used == static_cast<float>(world), "all_reduce in between value");
    CheckOk((*first_sum)->Wait(), "wait bucket 1");
    CheckOk((*second_sum)->Wait(), "wait bucket 2");
    absl::StatusOr<std::vector<at::Tensor>> firsts = group->AllGather(*first);
    absl::StatusOr<std::vector<at::Tensor>> seconds = group->AllGather(*second);
    CheckOk(firsts.status(), "gather bucket 1");
    CheckOk(seconds.status(), "gather bucket 2");
    for (int r = 0; r < world; ++r) {
      Check((*firsts)[r].equal(*first) && (*seconds)[r].equal(*second),
            "every rank holds the same bits");
    }
    at::Tensor exact_mean = first_values.to(at::kDouble);
    CheckOk(group->AllReduce(exact_mean, ReduceOp::kMean), "exact mean");
    Check(at::allclose(first->to(at::kDouble), exact_mean, 1e-5, 1e-6), "bucket 1 value");
  }

  // Bytes of different sizes per rank.
  std::string mine(static_cast<size_t>(rank * 3), static_cast<char>('a' + rank));
  absl::StatusOr<std::vector<std::string>> strings = group->AllGatherBytes(mine);
  CheckOk(strings.status(), "all_gather_bytes");
  for (int r = 0; r < world; ++r) {
    Check((*strings)[r] == std::string(static_cast<size_t>(r) * 3, static_cast<char>('a' + r)),
          "bytes value");
  }
  // The same bytes gathered to the last rank alone: the others get nothing.
  absl::StatusOr<std::vector<std::string>> to_last = group->GatherBytes(mine, world - 1);
  CheckOk(to_last.status(), "gather_bytes");
  Check(to_last->size() == (rank == world - 1 ? static_cast<size_t>(world) : 0u),
        "gather_bytes reaches its destination only");
  for (size_t r = 0; r < to_last->size(); ++r) {
    Check((*to_last)[r] == (*strings)[r], "gather_bytes value");
  }
  Check(!group->GatherBytes(mine, world).ok(), "bad gather destination rejected");
  absl::StatusOr<std::string> message =
      group->BroadcastBytes(rank == world - 1 ? "from the last rank" : "ignored", world - 1);
  CheckOk(message.status(), "broadcast_bytes");
  Check(*message == "from the last rank", "broadcast_bytes value");
  Check(!group->Broadcast(mine.data(), 0, DType::kFloat32, world).ok(), "bad src rejected");
  CheckOk(group->Barrier("end"), "barrier");
  if (rank == 0 && !cluster.run_dir.empty()) {
    CheckOk(SetWorkerResult(absl::StrCat("checked ", world)), "result");
  }
  std::printf("collectives ok on rank %d of %d (%s)\n", rank, world,
              group->uses_shared_memory() ? "shared memory" : "gloo");
}

// Rank 0 and rank 1 make different calls (`which` says how); every rank must get an error, and the
// group must still work afterwards. Rank 0 hands back the path ("shm" or "gloo") and its error.
void MismatchedCalls(const std::string& which) {
  std::unique_ptr<ProcessGroup> group = JoinGlooGroup();
  const int rank = group->rank();
  std::vector<float> floats(rank == 0 ? 4 : 8, 1.0f);
  std::vector<double> doubles(4, 1.0);
  absl::Status status;
  if (which == "count") {
    status = group->AllReduce(floats.data(), floats.size(), DType::kFloat32, ReduceOp::kSum);
  } else if (which == "dtype") {
    status = rank == 0 ? group->AllReduce(floats.data(), 4, DType::kFloat32, ReduceOp::kSum)
                       : group->AllReduce(doubles.data(), 4, DType::kFloat64, ReduceOp::kSum);
  } else if (which == "op") {
    status = group->AllReduce(floats.data(), 4, DType::kFloat32,
                              rank == 0 ? ReduceOp::kSum : ReduceOp::kMax);
  } else if (which == "broadcast_root") {
    status = group->Broadcast(floats.data(), 4, DType::kFloat32, rank);
  } else if (which == "broadcast_count") {
    status = group->Broadcast(floats.data(), floats.size(), DType::kFloat32, 0);
  } else if (which == "reduce_scatter") {
    const size_t shard = rank == 0 ? 4 : 8;
    std::vector<float> input(shard * static_cast<size_t>(group->world_size()), 1.0f);
    std::vector<float> output(shard);
    status =
        group->ReduceScatter(input.data(), output.data(), shard, DType::kFloat32, ReduceOp::kSum);
  } else if (which == "all_gather") {
    std::vector<float> gathered(floats.size() * static_cast<size_t>(group->world_size()));
    status = group->AllGather(floats.data(), floats.size(), DType::kFloat32, gathered.data());
  } else if (which == "barrier") {
    status = rank == 0 ? group->Barrier("mismatch")
                       : group->AllReduce(floats.data(), 4, DType::kFloat32, ReduceOp::kSum);
  } else {
    Fail(absl::StrCat("unknown mismatch '", which, "'"));
  }
  if (status.ok()) Fail(absl::StrCat("a mismatched call (", which, ") went through"));
  double one = 1.0;
  CheckOk(group->AllReduce(&one, 1, DType::kFloat64, ReduceOp::kSum), "all_reduce afterwards");
  Check(one == group->world_size(), "all_reduce afterwards value");
  if (rank == 0) {
    CheckOk(SetWorkerResult(absl::StrCat(group->uses_shared_memory() ? "shm" : "gloo", "\n",
                                         status.ToString())),
            "result");
  }
}

// Every rank joins a group with a 3 s timeout (or the one given) and runs two collectives; then
// rank `stalled` stops itself (SIGSTOP), and the others' next all-reduce times out, naming it.
void Stall(int stalled, absl::Duration timeout) {
  absl::StatusOr<ClusterInfo> cluster = DetectClusterEnvironment();
  CheckOk(cluster.status(), "cluster environment");
  absl::StatusOr<std::unique_ptr<ProcessGroup>> joined =
      ProcessGroup::Create(*cluster, {Backend::kGloo, timeout});
  CheckOk(joined.status(), "join");
  ProcessGroup& group = **joined;
  std::vector<float> values(4, 1.0f);
  CheckOk(group.Barrier("start"), "barrier");
  CheckOk(group.AllReduce(values.data(), 4, DType::kFloat32, ReduceOp::kSum), "all_reduce");
  if (group.rank() == stalled) raise(SIGSTOP);
  CheckOk(group.AllReduce(values.data(), 4, DType::kFloat32, ReduceOp::kSum), "stalled all_reduce");
}

bool ThisRank(const char* arg) { return std::atoi(arg) == std::atoi(std::getenv("RANK")); }

// Writes `text` to `path` whole (a temporary file, then rename), for a reader that polls.
void WriteAtomically(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path + ".tmp");
    out << text;
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

[[noreturn]] void HangWithChild(const std::string& pid_file, int rank) {
  const pid_t child = fork();
  if (child == 0) SleepForever();
  if (child < 0) Fail(absl::StrCat("fork: ", std::strerror(errno)));
  WriteAtomically(absl::StrCat(pid_file, ".child", rank), absl::StrCat(child, "\n"));
  SleepForever();
}

// A rank other than `failing_rank`: waits for that rank's report, then fails itself, second.
[[noreturn]] void FailAfter(const char* failing_rank) {
  const std::string report =
      RunDirErrorFile(std::getenv("DDPSPAWN_RUN_DIR"), std::atoi(failing_rank));
  while (!std::filesystem::exists(report)) absl::SleepFor(absl::Milliseconds(1));
  CheckOk(SetWorkerError(absl::StrCat("rank ", failing_rank, " failed, so this rank stops")),
          "error report");
  std::exit(1);
}

[[noreturn]] void SlowExit(const char* failing_rank) {
  if (ThisRank(failing_rank)) {
    signal(SIGTERM, SIG_IGN);
    CheckOk(SetWorkerError("the failure that ended the job"), "error report");
    absl::SleepFor(absl::Milliseconds(500));
    std::exit(1);
  }
  FailAfter(failing_rank);
}

[[noreturn]] void ReportAndHang(const char* failing_rank) {
  if (ThisRank(failing_rank)) {
    CheckOk(SetWorkerError("the failure that ended the job"), "error report");
    SleepForever();
  }
  FailAfter(failing_rank);
}

[[noreturn]] void IgnoreTerm(const char* ignoring_rank) {
  if (ThisRank(ignoring_rank)) signal(SIGTERM, SIG_IGN);
  const std::string run_dir = std::getenv("DDPSPAWN_RUN_DIR");
  const int rank = std::atoi(std::getenv("RANK")), world = std::atoi(std::getenv("WORLD_SIZE"));
  WriteAtomically(absl::StrCat(run_dir, "/ready.", rank), "");
  if (rank != world - 1) SleepForever();
  for (int r = 0; r < world; ++r) {
    while (!std::filesystem::exists(absl::StrCat(run_dir, "/ready.", r))) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  std::exit(3);
}

int Launch(const std::string& method, const std::string& pid_file, const char* self) {
  LaunchSpec spec;
  spec.nprocs = 2;
  absl::StatusOr<StartMethod> start_method = ParseStartMethod(method);
  if (!start_method.ok()) return 2;
  spec.start_method = *start_method;
  spec.argv = {self, "hang_with_child", pid_file};
  spec.worker = [pid_file](int rank) -> int { HangWithChild(pid_file, rank); };
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  if (!job.ok() || !(*job)->Start().ok()) return 2;
  std::string pids;
  for (const RankOutcome& o : (*job)->outcomes()) absl::StrAppend(&pids, o.pid, "\n");
  WriteAtomically(pid_file, pids);
  return (*job)->Wait().ok() ? 0 : 1;
}

// One node's launcher of a job of `nnodes` nodes of 2 ranks each, meeting at `master`:`port` (node
// 0 serves the store), whose ranks run `collectives`.
int LaunchNode(int nnodes, int node_rank, const std::string& master, int port, const char* self) {
  NodeRendezvousOptions options;
  options.master_addr = master;
  options.master_port = port;
  options.nnodes = nnodes;
  options.node_rank = node_rank;
  options.nprocs_per_node = 2;
  options.job = "test_worker collectives";
  options.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<NodeRendezvous>> rendezvous = NodeRendezvous::Join(options);
  CheckOk(rendezvous.status(), "rendezvous");
  LaunchSpec spec;
  spec.nprocs = 2;
  spec.nnodes = nnodes;
  spec.node_rank = node_rank;
  spec.master_addr = master;
  spec.master_port = port;
  spec.start_method = StartMethod::kSpawn;
  spec.argv = {self, "collectives"};
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  CheckOk(job.status(), "job");
  absl::Status status = (*job)->Start();
  if (status.ok()) status = (*job)->Wait();
  if (!status.ok()) {
    std::string unreported;
    status = (*rendezvous)->ShareFailure(status, absl::Now(), absl::Seconds(10), &unreported);
  }
  CheckOk(status, "node's ranks");
  CheckOk((*rendezvous)->Finish(absl::Seconds(30), (*job)->result().value_or("")).status(),
          "finish");
  return 0;
}

// This process's open descriptors, ascending, separated by spaces.
std::string OpenDescriptors() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return "cannot read /proc/self/fd";
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != dirfd(dir)) fds.push_back(fd);
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return absl::StrJoin(fds, " ");
}

// A matrix product and an element-wise sum with `threads` intra-op threads: both are OpenMP
// parallel regions in LibTorch's CPU build.
double ParallelWork(int threads) {
  at::set_num_threads(threads);
  at::Tensor a = at::ones({256, 256});
  at::Tensor big = at::ones({1 << 20});
  return at::mm(a, a).sum().item<double>() + big.add(1).sum().item<double>();
}

int ForkAfterParallel() {
  const double expected = ParallelWork(2);
  LaunchSpec spec;
  spec.nprocs = 2;
  spec.start_method = StartMethod::kFork;
  spec.timeout = absl::Seconds(60);  // a hang is a failure, not a hung test
  spec.grace_period = absl::Seconds(1);
  spec.worker = [expected](int rank) {
    if (std::abs(ParallelWork(2) - expected) > 1e-6 * expected) return 3;
    if (rank == 0) (void)SetWorkerResult("forked ranks ran 2-thread work");
    return 0;
  };
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  CheckOk(job.status(), "inner job");
  CheckOk((*job)->Start(), "inner job start");
  CheckOk((*job)->Wait(), "inner job");
  CheckOk(SetWorkerResult((*job)->result().value_or("no result")), "result");
  return 0;
}

int Elastic(const char* failing_rank) {
  std::unique_ptr<ProcessGroup> group = JoinGlooGroup();
  double value = group->rank() + 1.0;
  CheckOk(group->AllReduce(&value, 1, DType::kFloat64, ReduceOp::kSum), "all_reduce");
  if (group->cluster().attempt == 0 && ThisRank(failing_rank)) std::exit(5);
  CheckOk(group->AllReduce(&value, 1, DType::kFloat64, ReduceOp::kSum), "second all_reduce");
  std::printf("attempt %d rank %d sum %g\n", group->cluster().attempt, group->rank(), value);
  return 0;
}

int Main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "launch" && argc == 4) return Launch(argv[2], argv[3], argv[0]);
  if (mode == "node" && argc == 6) {
    return LaunchNode(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], std::atoi(argv[5]), argv[0]);
  }
  if (mode == "parent") {
    if (std::atoi(std::getenv("RANK")) == 0) {
      CheckOk(SetWorkerResult(absl::StrCat("parent ", getppid())), "result");
    }
    return 0;
  }
  if (mode == "ok") {
    if (std::atoi(std::getenv("RANK")) == 0) {
      CheckOk(SetWorkerResult(absl::StrCat("result from rank 0 of ", std::getenv("WORLD_SIZE"))),
              "result");
    }
    return 0;
  }
  if (mode == "throw" && argc == 3) {
    InstallTerminateHandler();
    std::unique_ptr<ProcessGroup> group = JoinGlooGroup();
    if (ThisRank(argv[2])) throw std::runtime_error("deliberate failure in the test worker");
    CheckOk(group->Barrier("after throw"),
            "barrier");  // fails once the thrower is gone
    return 0;
  }
  if (mode == "exit" && argc == 4) {
    if (ThisRank(argv[2])) std::exit(std::atoi(argv[3]));
    SleepForever();
  }
  if (mode == "signal" && argc == 4) {
    if (ThisRank(argv[2])) raise(std::atoi(argv[3]));
    SleepForever();
  }
  if (mode == "slow_exit" && argc == 3) SlowExit(argv[2]);
  if (mode == "report_and_hang" && argc == 3) ReportAndHang(argv[2]);
  if (mode == "hang") {
    if (argc == 2 || ThisRank(argv[2])) SleepForever();
    return 0;
  }
  if (mode == "ignore_term" && argc == 3) IgnoreTerm(argv[2]);
  if (mode == "hang_with_child" && argc == 3) {
    HangWithChild(argv[2], std::atoi(std::getenv("RANK")));
  }
  if (mode == "mismatch" && argc == 3) {
    MismatchedCalls(argv[2]);
    return 0;
  }
  if (mode == "stall" && (argc == 3 || argc == 4)) {
    Stall(std::atoi(argv[2]), absl::Seconds(argc == 4 ? std::atoi(argv[3]) : 3));
    return 0;
  }
  if (mode == "descriptors") {
    if (std::atoi(std::getenv("RANK")) == 0) CheckOk(SetWorkerResult(OpenDescriptors()), "result");
    return 0;
  }
  if (mode == "fork_after_parallel") return ForkAfterParallel();
  if (mode == "elastic" && argc == 3) return Elastic(argv[2]);
  if (mode == "collectives") {
    Collectives();
    return 0;
  }
  if (mode == "groups_in_turn") {
    // Three groups one after another; the last rank lets go of each one late, while the others
    // already join the next.
    for (int round = 0; round < 3; ++round) {
      std::unique_ptr<ProcessGroup> group = JoinGlooGroup();
      double value = group->rank() + 1.0;
      CheckOk(group->AllReduce(&value, 1, DType::kFloat64, ReduceOp::kSum), "all_reduce");
      const int world = group->world_size();
      Check(value == world * (world + 1) / 2.0, "all_reduce value");
      if (group->rank() == world - 1) absl::SleepFor(absl::Milliseconds(300));
    }
    if (std::atoi(std::getenv("RANK")) == 0) CheckOk(SetWorkerResult("three groups"), "result");
    return 0;
  }
  if (mode == "straggler" && argc == 3) {
    // Rank <slow> sleeps 10 ms before each of 20 all-reduces; rank 0 reports what the group's
    // arrivals say.
    const int slow = std::atoi(argv[2]);
    std::unique_ptr<ProcessGroup> group = JoinGlooGroup();
    const ArrivalReport before = group->arrivals();
    for (int round = 0; round < 20; ++round) {
      if (group->rank() == slow) absl::SleepFor(absl::Milliseconds(10));
      float value = 1.0f;
      CheckOk(group->AllReduce(&value, 1, DType::kFloat32, ReduceOp::kSum), "all_reduce");
    }
    const ArrivalReport report = group->arrivals().Since(before);
    if (group->rank() == 0) {
      std::string text = absl::StrCat(report.Summary(), "\n");
      for (const auto& [key, value] : report.ToPairs())
        absl::StrAppend(&text, key, "=", value, "\n");
      CheckOk(SetWorkerResult(text), "result");
    }
    return 0;
  }
  std::fprintf(stderr, "test_worker: unknown mode '%s'\n", mode.c_str());
  return 64;
}

}  // namespace
}  // namespace ddpspawn

int main(int argc, char** argv) {
  ddpspawn::ServeForksIfForkserver();
  return ddpspawn::Main(argc, argv);
}
