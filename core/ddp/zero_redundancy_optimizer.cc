// ZeroRedundancyOptimizer: the partition, the sharded step and all-gather, and the unsharded state
// in and out (see zero_redundancy_optimizer.h).
#include "core/ddp/zero_redundancy_optimizer.h"

#include <torch/serialize/archive.h>

#include <algorithm>
#include <iterator>
#include <numeric>
#include <string>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerParamGroup;

// Largest first, each to the rank with the fewest elements so far (the lowest such rank); ties in
// size keep their order, so every rank agrees.
std::vector<int> Partition(const std::vector<at::Tensor>& parameters, int world,
                           std::vector<int64_t>* elements_per_rank) {
  std::vector<size_t> order(parameters.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return parameters[a].numel() > parameters[b].numel();
  });
  elements_per_rank->assign(world, 0);
  std::vector<int> owners(parameters.size(), 0);
  for (size_t index : order) {
    const int rank =
        static_cast<int>(std::min_element(elements_per_rank->begin(), elements_per_rank->end()) -
                         elements_per_rank->begin());
    owners[index] = rank;
    (*elements_per_rank)[rank] += parameters[index].numel();
  }
  return owners;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(
    const std::vector<OptimizerParamGroup>& groups,
    std::unique_ptr<torch::optim::OptimizerOptions> defaults, OptimizerFactory make,
    ProcessGroup* group)
    : ShardedOptimizer(groups, std::move(defaults), std::move(make), group,
                       "ZeroRedundancyOptimizer") {}

absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> ZeroRedundancyOptimizer::Create(
    OptimizerFactory make, ProcessGroup* group, int64_t gather_buffer_bytes) {
  if (group == nullptr) return absl::InvalidArgumentError("ZeroRedundancyOptimizer: no group");
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> full, make());
  const std::vector<at::Tensor> parameters = AllParameters(*full);
  if (parameters.empty()) {
    return absl::InvalidArgumentError("ZeroRedundancyOptimizer: the optimizer has no parameters");
  }
  for (size_t i = 1; i < parameters.size(); ++i) {
    if (parameters[i].scalar_type() != parameters[0].scalar_type() ||
        parameters[i].device() != parameters[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ZeroRedundancyOptimizer: parameter ", i, " is ", parameters[i].toString(), " on ",
          parameters[i].device().str(), " but parameter 0 is ", parameters[0].toString(), " on ",
          parameters[0].device().str(), "; every parameter must be of one dtype and device"));
    }
  }
  std::vector<OptimizerParamGroup> groups;
  for (const OptimizerParamGroup& g : full->param_groups()) groups.emplace_back(g);
  auto zero = std::unique_ptr<ZeroRedundancyOptimizer>(
      new ZeroRedundancyOptimizer(groups, full->defaults().clone(), std::move(make), group));
  zero->owners_ = Partition(parameters, group->world_size(), &zero->elements_per_rank_);
  zero->shard_elements_ = zero->elements_per_rank_[group->rank()];
  zero->gather_buffer_bytes_ = gather_buffer_bytes;
  ASSIGN_OR_RETURN(zero->shard_, zero->MakeShard(group->rank()));
  return zero;
}

absl::StatusOr<std::unique_ptr<Optimizer>> ZeroRedundancyOptimizer::MakeShard(int rank) const {
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> shard, make_());
  RETURN_IF_ERROR(CheckSameParameters(*this, *shard, "ZeroRedundancyOptimizer"));
  size_t index = 0;
  for (OptimizerParamGroup& g : shard->param_groups()) {
    std::vector<at::Tensor> kept;
    for (const at::Tensor& p : g.params()) {
      if (owners_[index++] == rank) kept.push_back(p);
    }
    g.params() = std::move(kept);
  }
  // An optimizer that makes its state when it is built (Adagrad) made it for every parameter: keep
  // only the shard's, or the state is not sharded and a consolidation would take the others' fresh
  // state for theirs.
  std::unordered_set<void*> owned;
  for (const OptimizerParamGroup& g : shard->param_groups()) {
    for (const at::Tensor& p : g.params()) owned.insert(p.unsafeGetTensorImpl());
  }
  for (auto it = shard->state().begin(); it != shard->state().end();) {
    it = owned.count(it->first) != 0 ? std::next(it) : shard->state().erase(it);
  }
  return shard;
}

absl::Status ZeroRedundancyOptimizer::Step() {
  RETURN_IF_ERROR(StepShard(*shard_));
  return AllGatherParameters();
}

absl::Status ZeroRedundancyOptimizer::AllGatherParameters() {
  const std::vector<at::Tensor> parameters = AllParameters(*this);
  const int world = group_->world_size(), me = group_->rank();
  // Each rank's shard is its parameters flat and back to back, padded to the largest shard; chunk k
  // of every shard is gathered at once, so the buffer holds world * chunk elements, not the whole
  // padded shards. The same sizes on every rank, so every rank makes the same calls.
  const int64_t padded = *std::max_element(elements_per_rank_.begin(), elements_per_rank_.end());
  const int64_t chunk =
      std::clamp<int64_t>(gather_buffer_bytes_ / (parameters[0].element_size() * world), 1,
                          std::max<int64_t>(padded, 1));
  std::vector<int64_t> offset(parameters.size());  // of each parameter in its owner's shard
  std::vector<int64_t> filled(world, 0);
  for (size_t i = 0; i < parameters.size(); ++i) {
    offset[i] = filled[owners_[i]];
    filled[owners_[i]] += parameters[i].numel();
  }
  return StatusOnException("ZeroRedundancyOptimizer: all-gathering the shards", [&] {
    at::NoGradGuard no_grad;
    // Each parameter flat: this rank's to read from (a copy only where one is not contiguous), the
    // others' to write into (themselves, or a contiguous copy written back at the end).
    std::vector<at::Tensor> flat(parameters.size());
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (owners_[i] == me) {
        flat[i] = parameters[i].reshape(-1);
        continue;
      }
      flat[i] = parameters[i].is_contiguous()
                    ? parameters[i].view(-1)
                    : at::empty({parameters[i].numel()}, parameters[i].options());
    }
    const at::TensorOptions options = parameters[0].options();
    at::Tensor mine = at::empty({chunk}, options);
    at::Tensor all = at::empty({chunk * world}, options);
    for (int64_t start = 0; start < padded; start += chunk) {
      const int64_t n = std::min(chunk, padded - start);
      at::Tensor my_piece = mine.narrow(0, 0, n);
      if (start + n > elements_per_rank_[me]) my_piece.zero_();  // the padding
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (owners_[i] != me) continue;
        const int64_t begin = std::max(start, offset[i]);
        const int64_t end = std::min(start + n, offset[i] + parameters[i].numel());
        if (begin >= end) continue;
        my_piece.narrow(0, begin - start, end - begin)
            .copy_(flat[i].narrow(0, begin - offset[i], end - begin));
      }
      at::Tensor gathered = all.narrow(0, 0, n * world);
      RETURN_IF_ERROR(group_->AllGatherInto(my_piece, gathered));
      for (size_t i = 0; i < parameters.size(); ++i) {
        const int owner = owners_[i];
        if (owner == me) continue;
        const int64_t begin = std::max(start, offset[i]);
        const int64_t end = std::min(start + n, offset[i] + parameters[i].numel());
        if (begin >= end) continue;
        flat[i]
            .narrow(0, begin - offset[i], end - begin)
            .copy_(gathered.narrow(0, owner * n + (begin - start), end - begin));
      }
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (owners_[i] != me && !parameters[i].is_contiguous()) {
        parameters[i].copy_(flat[i].view(parameters[i].sizes()));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status ZeroRedundancyOptimizer::ConsolidateStateDict(int to) {
  ASSIGN_OR_RETURN(std::vector<std::string> shards, GatherShardStates(*shard_, to));
  if (group_->rank() != to) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> full, make_());
  RETURN_IF_ERROR(CheckSameParameters(*this, *full, "ZeroRedundancyOptimizer"));
  for (int rank = 0; rank < group_->world_size(); ++rank) {
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> shard, MakeShard(rank));
    RETURN_IF_ERROR(LoadShardState(*shard, shards[rank], rank));
    for (auto& [key, state] : shard->state()) full->state()[key] = std::move(state);
  }
  KeepConsolidated(std::move(full));
  return absl::OkStatus();
}

void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive& archive) {
  std::unique_ptr<Optimizer> full = LoadUnsharded(archive);
  const std::vector<at::Tensor> parameters = AllParameters(*this);
  shard_->state().clear();
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (owners_[i] != group_->rank()) continue;
    void* key = parameters[i].unsafeGetTensorImpl();
    auto found = full->state().find(key);
    if (found != full->state().end()) shard_->state()[key] = std::move(found->second);
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    param_groups_[g].set_options(full->param_groups()[g].options().clone());
    shard_->param_groups()[g].set_options(full->param_groups()[g].options().clone());
  }
}

}  // namespace ddpspawn
