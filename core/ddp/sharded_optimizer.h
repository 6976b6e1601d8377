// What the sharded optimizers (ZeRO-1's ZeroRedundancyOptimizer, ZeRO-2's ShardGradOpOptimizer)
// share: the interface a training loop drives them by, the per-parameter state of torch::optim's
// optimizers as tensors, and gradient clipping by a norm that may span every rank's shard.
#ifndef DDPSPAWN_CORE_DDP_SHARDED_OPTIMIZER_H_
#define DDPSPAWN_CORE_DDP_SHARDED_OPTIMIZER_H_

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/comm/process_group.h"

namespace ddpspawn {

// Makes the optimizer to shard, over the same parameter tensors (all of them, in the same groups
// and order) each time it is called.
using OptimizerFactory = std::function<absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>>()>;

// A torch::optim::Optimizer whose state is split across the ranks of a group. Its param_groups()
// list every parameter with the options a scheduler sets; each step copies them onto the shard's.
// Thread-compatible: one thread drives it, as a training loop does; Step() and
// ConsolidateStateDict() are collectives.
//
// Ownership: borrows the group, which must outlive it.
class ShardedOptimizer : public torch::optim::Optimizer {
 public:
  // Steps this rank's shard, then all-gathers the updated parameters. A collective.
  virtual absl::Status Step() = 0;
  // Step(), as torch::optim::Optimizer's interface wants it: the closure runs first, with gradients
  // enabled; an error throws c10::Error.
  at::Tensor step(LossClosure closure = nullptr) final;
  // Gathers every rank's shard of the state onto rank `to`, whose save() then writes the unsharded
  // optimizer's state (LibTorch's own format, which a plain optimizer loads). A collective.
  virtual absl::Status ConsolidateStateDict(int to) = 0;
  // On the consolidating rank, after ConsolidateStateDict(): the unsharded state, as the wrapped
  // optimizer would save it. Elsewhere, or before, it throws: a sharded save would lose the other
  // ranks' state.
  void save(torch::serialize::OutputArchive& archive) const final;
  // Lets go of the consolidated state (after saving it: it is the whole optimizer's, on one rank).
  void ReleaseConsolidated() { consolidated_.reset(); }
  // The optimizer over this rank's shard.
  virtual const torch::optim::Optimizer& shard_optimizer() const = 0;
  // Parameter elements this rank steps.
  virtual int64_t shard_elements() const = 0;
  // The tensors whose .grad() the next Step() reads (what clipping and unscaling must see).
  virtual std::vector<at::Tensor> StepGradientHolders() const = 0;
  // The group the gradients are sharded over (a global norm sums over it); null where every rank
  // holds every averaged gradient.
  virtual ProcessGroup* gradient_shard_group() const = 0;

 protected:
  // `make` makes the unsharded optimizer; `who` names the subclass in messages.
  ShardedOptimizer(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                   std::unique_ptr<torch::optim::OptimizerOptions> defaults, OptimizerFactory make,
                   ProcessGroup* group, absl::string_view who);
  // Copies the base groups' options (what a scheduler set) onto `shard`'s groups and steps it.
  absl::Status StepShard(torch::optim::Optimizer& shard);
  // ConsolidateStateDict's first half: checks `to`, forgets the last consolidation, and gathers
  // every rank's `shard` state, serialized, to `to` (a collective; empty on the other ranks).
  absl::StatusOr<std::vector<std::string>> GatherShardStates(const torch::optim::Optimizer& shard,
                                                             int to);
  // Reads rank `rank`'s serialized shard state (from GatherShardStates) into `shard`, an optimizer
  // over that rank's part of the parameters.
  absl::Status LoadShardState(torch::optim::Optimizer& shard, const std::string& bytes, int rank);
  // ConsolidateStateDict's end: `full` (the unsharded state, rebuilt) takes the base groups'
  // options and is what save() writes.
  void KeepConsolidated(std::unique_ptr<torch::optim::Optimizer> full);
  // load()'s start: a new unsharded optimizer that has read `archive` (throws c10::Error on an
  // error, as load() does), and no consolidation any more.
  std::unique_ptr<torch::optim::Optimizer> LoadUnsharded(torch::serialize::InputArchive& archive);

  const OptimizerFactory make_;
  ProcessGroup* const group_;
  const std::string who_;
  // The unsharded optimizer that ConsolidateStateDict() filled (on its `to`).
  std::unique_ptr<torch::optim::Optimizer> consolidated_;
};

// The tensors of one parameter's state in torch::optim's SGD, Adam, AdamW, RMSprop and Adagrad (the
// defined ones, in a fixed order); Unimplemented for another optimizer's state.
absl::StatusOr<std::vector<at::Tensor>> OptimizerStateTensors(
    const torch::optim::OptimizerParamState& state);
// Replaces each of those tensors, in the same order, by `map`'s result for it.
absl::Status MapOptimizerStateTensors(torch::optim::OptimizerParamState& state,
                                      const std::function<at::Tensor(const at::Tensor&)>& map);

// Bytes of the tensors in `optimizer`'s per-parameter state (what ZeRO shards; for a
// ShardedOptimizer, this rank's shard's), by OptimizerStateTensors.
absl::StatusOr<int64_t> OptimizerStateBytes(const torch::optim::Optimizer& optimizer);

// Every parameter of `optimizer`, group by group.
std::vector<at::Tensor> AllParameters(const torch::optim::Optimizer& optimizer);

// OK when `a` and `b` hold the same groups of the same tensors; else InvalidArgument naming the
// difference, for `who`'s factory, which made both.
absl::Status CheckSameParameters(const torch::optim::Optimizer& a, const torch::optim::Optimizer& b,
                                 absl::string_view who);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_SHARDED_OPTIMIZER_H_
