// DDP communication hooks: how a bucket of gradients is averaged across ranks. The default
// all-reduce, fp16 and bf16 compression, PowerSGD with error feedback, and a wrapper that
// compresses around another hook. All work on CPU with Gloo (Gloo cannot all-reduce bf16: a bf16
// bucket is all-gathered and summed in fp32 instead).
#ifndef DDPSPAWN_CORE_DDP_COMM_HOOKS_H_
#define DDPSPAWN_CORE_DDP_COMM_HOOKS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/process_group.h"
#include "core/util/option_defaults.h"

namespace ddpspawn {

// One bucket of gradients, as a hook sees it. Plain values; thread-compatible (its tensors share
// storage with the reducer's bucket).
struct GradBucket {
  int index = 0;                      // buckets are started in index order on every rank
  int count = 0;                      // how many buckets the model has
  at::Tensor buffer;                  // flat, contiguous: every gradient of the bucket back to back
  std::vector<at::Tensor> gradients;  // views into `buffer`, shaped like the parameters
  bool is_last() const { return index == count - 1; }
};

// An averaging in flight. After Wait(), the bucket's buffer holds the mean over ranks. Not
// thread-safe: the reducer waits for it once, under its mutex. It keeps the bucket's tensors and a
// reference to the group it was started on, which must outlive it.
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
  virtual absl::Status Wait() = 0;
};

// Thread safety: the reducer calls Start() and the reductions' Wait() under its mutex, so one
// reducer never calls a hook concurrently. The built-in hooks keep no state of their own except
// PowerSGD's PowerSgdState, which belongs to one reducer: do not share a PowerSGD hook between
// reducers. Ownership: a hook keeps nothing of the group or the bucket past Start(); the reductions
// it returns refer to both, so the group must outlive them.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts averaging `bucket`. Every rank starts the same buckets in the same order.
  virtual absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                                  GradBucket& bucket) = 0;
};

// Sum all-reduce, then divide by the world size (PyTorch's default).
std::shared_ptr<CommHook> MakeAllReduceHook();
// Cast to fp16 (after dividing by the world size, against overflow), all-reduce, cast back.
std::shared_ptr<CommHook> MakeFp16CompressHook();
// Round to bf16, exchange the bf16 values, sum them in fp32.
std::shared_ptr<CommHook> MakeBf16CompressHook();

// Runs `inner` on a copy of the bucket cast to `dtype` (at::kHalf or at::kBFloat16) and casts the
// result back: Lightning's fp16_compress_wrapper / bf16_compress_wrapper.
absl::StatusOr<std::shared_ptr<CommHook>> MakeCompressWrapper(at::ScalarType dtype,
                                                              std::shared_ptr<CommHook> inner);

struct PowerSgdOptions {
  int matrix_approximation_rank = DDPSPAWN_DEFAULT_POWERSGD_RANK;
  // Plain all-reduce for the first iterations (PowerSGD's error feedback needs warm gradients).
  int64_t start_iteration = DDPSPAWN_DEFAULT_POWERSGD_START_ITERATION;
  // Compress a matrix only when rows*cols / ((rows+cols)*rank) exceeds this.
  double min_compression_rate = 2.0;
  bool use_error_feedback = true;
  bool warm_start = true;  // reuse Q between iterations
  uint64_t seed = 0;       // for the initial Q; the same on every rank
  // torch's batched_powerSGD_hook: the whole bucket, zero-padded to the smallest square, is one
  // matrix (so flat 1-D gradients are compressed too), compressed when side / (2 * rank) reaches
  // min_compression_rate; else each gradient of two or more dimensions is a matrix of its own.
  bool batched = false;
};

// PowerSGD's state, shared with the caller (Lightning's ddp_comm_state).
struct PowerSgdState {
  PowerSgdOptions options;
  int64_t iteration = 0;            // synced iterations seen so far
  std::map<int, at::Tensor> error;  // error feedback, per bucket
  std::map<int, std::vector<at::Tensor>> p,
      q;  // low-rank factors, per bucket and matrix
  // Elements sent per iteration, for measuring compression: compressed vs. uncompressed. Counted
  // over the buckets of the last iteration that was compressed (both 0 before start_iteration). The
  // hook writes them while a backward pass runs (under the reducer's lock), without a lock of its
  // own: read them between iterations, not during backward().
  int64_t last_sent_elements = 0;
  int64_t last_dense_elements = 0;
};

// Vogels et al., PowerSGD: one power iteration per step, with error feedback and warm start
// (batched or per matrix, as state->options.batched says).
std::shared_ptr<CommHook> MakePowerSgdHook(std::shared_ptr<PowerSgdState> state);

// The built-in hooks, named as at the CLI and the C ABI: "allreduce", "fp16", "bf16", "powersgd",
// "batched_powersgd", "post_localsgd". kPostLocalSgd: torch's post_localSGD_hook
// (core/ddp/post_local_sgd.h).
enum class CommHookKind { kAllReduce, kFp16, kBf16, kPowerSgd, kBatchedPowerSgd, kPostLocalSgd };
absl::string_view CommHookName(CommHookKind kind);
// "" is "allreduce".
absl::StatusOr<CommHookKind> ParseCommHook(absl::string_view name);
bool IsPowerSgd(CommHookKind kind);

// For the PowerSGD kinds: a state with default options and the given rank and start iteration
// (batched for kBatchedPowerSgd), for MakePowerSgdHook and for reading what it sent;
// InvalidArgument for a rank < 1 or a start < 0. Null for the other kinds.
absl::StatusOr<std::shared_ptr<PowerSgdState>> MakePowerSgdState(
    CommHookKind kind, int powersgd_rank = DDPSPAWN_DEFAULT_POWERSGD_RANK,
    int64_t powersgd_start = DDPSPAWN_DEFAULT_POWERSGD_START_ITERATION);

// A new hook of that kind (PowerSGD's with MakePowerSgdState's state); InvalidArgument for
// kPostLocalSgd, whose hook PostLocalSgd makes.
absl::StatusOr<std::shared_ptr<CommHook>> MakeCommHook(
    CommHookKind kind, int powersgd_rank = DDPSPAWN_DEFAULT_POWERSGD_RANK,
    int64_t powersgd_start = DDPSPAWN_DEFAULT_POWERSGD_START_ITERATION);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_COMM_HOOKS_H_
