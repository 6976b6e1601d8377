// The sharded optimizers' common parts (see sharded_optimizer.h).
#include "core/ddp/sharded_optimizer.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

ShardedOptimizer::ShardedOptimizer(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                   std::unique_ptr<torch::optim::OptimizerOptions> defaults,
                                   OptimizerFactory make, ProcessGroup* group,
                                   absl::string_view who)
    : Optimizer(groups, std::move(defaults)), make_(std::move(make)), group_(group), who_(who) {}

at::Tensor ShardedOptimizer::step(LossClosure closure) {
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const absl::Status status = Step();
  TORCH_CHECK(status.ok(), status.ToString());
  return loss;
}

void ShardedOptimizer::save(torch::serialize::OutputArchive& archive) const {
  TORCH_CHECK(consolidated_ != nullptr, who_, ": rank ", group_->rank(),
              " has no consolidated state to save; call ConsolidateStateDict(to) on every rank, "
              "then save on rank `to`");
  consolidated_->save(archive);
}

absl::Status ShardedOptimizer::StepShard(torch::optim::Optimizer& shard) {
  return StatusOnException(absl::StrCat(who_, ": the shard's step"), [&] {
    for (size_t g = 0; g < param_groups_.size(); ++g) {
      shard.param_groups()[g].set_options(param_groups_[g].options().clone());
    }
    shard.step();
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::string>> ShardedOptimizer::GatherShardStates(
    const torch::optim::Optimizer& shard, int to) {
  if (to < 0 || to >= group_->world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, ": cannot consolidate to rank ", to, " of ", group_->world_size()));
  }
  consolidated_.reset();
  std::string mine;
  RETURN_IF_ERROR(StatusOnException(absl::StrCat(who_, ": saving the shard's state"), [&] {
    torch::serialize::OutputArchive archive;
    shard.save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    mine = bytes.str();
    return absl::OkStatus();
  }));
  // Only `to` receives the shards: the others never hold more than their own.
  return group_->GatherBytes(mine, to);
}

absl::Status ShardedOptimizer::LoadShardState(torch::optim::Optimizer& shard,
                                              const std::string& bytes, int rank) {
  return StatusOnException(absl::StrCat(who_, ": rank ", rank, "'s state"), [&] {
    torch::serialize::InputArchive archive;
    std::istringstream stream(bytes);
    archive.load_from(stream);
    shard.load(archive);
    return absl::OkStatus();
  });
}

void ShardedOptimizer::KeepConsolidated(std::unique_ptr<torch::optim::Optimizer> full) {
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    full->param_groups()[g].set_options(param_groups_[g].options().clone());
  }
  consolidated_ = std::move(full);
}

std::unique_ptr<torch::optim::Optimizer> ShardedOptimizer::LoadUnsharded(
    torch::serialize::InputArchive& archive) {
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> made = make_();
  TORCH_CHECK(made.ok(), made.status().ToString());
  std::unique_ptr<torch::optim::Optimizer> full = *std::move(made);
  full->load(archive);
  consolidated_.reset();
  return full;
}

namespace {

// Adam's and AdamW's states: the same three tensors in two types.
template <typename AdamState, typename Apply>
void MapAdamState(AdamState& state, const Apply& apply) {
  state.exp_avg(apply(state.exp_avg()));
  state.exp_avg_sq(apply(state.exp_avg_sq()));
  state.max_exp_avg_sq(apply(state.max_exp_avg_sq()));
}

}  // namespace

absl::Status MapOptimizerStateTensors(torch::optim::OptimizerParamState& state,
                                      const std::function<at::Tensor(const at::Tensor&)>& map) {
  auto apply = [&map](const at::Tensor& t) { return t.defined() ? map(t) : t; };
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(&state)) {
    MapAdamState(*adam, apply);
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(&state)) {
    MapAdamState(*adamw, apply);
  } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(&state)) {
    sgd->momentum_buffer(apply(sgd->momentum_buffer()));
  } else if (auto* rms = dynamic_cast<torch::optim::RMSpropParamState*>(&state)) {
    rms->square_avg(apply(rms->square_avg()));
    rms->momentum_buffer(apply(rms->momentum_buffer()));
    rms->grad_avg(apply(rms->grad_avg()));
  } else if (auto* ada = dynamic_cast<torch::optim::AdagradParamState*>(&state)) {
    ada->sum(apply(ada->sum()));
  } else {
    return absl::UnimplementedError(
        "the state of an optimizer other than SGD, Adam, AdamW, RMSprop and Adagrad");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> OptimizerStateTensors(
    const torch::optim::OptimizerParamState& state) {
  std::vector<at::Tensor> tensors;
  // A shallow copy (the same tensors), which the map leaves as it is.
  std::unique_ptr<torch::optim::OptimizerParamState> copy = state.clone();
  RETURN_IF_ERROR(MapOptimizerStateTensors(*copy, [&tensors](const at::Tensor& t) {
    tensors.push_back(t);
    return t;
  }));
  return tensors;
}

absl::StatusOr<int64_t> OptimizerStateBytes(const torch::optim::Optimizer& optimizer) {
  if (const auto* sharded = dynamic_cast<const ShardedOptimizer*>(&optimizer)) {
    return OptimizerStateBytes(sharded->shard_optimizer());
  }
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    absl::StatusOr<std::vector<at::Tensor>> tensors = OptimizerStateTensors(*state);
    if (!tensors.ok()) {
      return absl::Status(tensors.status().code(),
                          absl::StrCat("OptimizerStateBytes: ", tensors.status().message()));
    }
    for (const at::Tensor& t : *tensors) bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

std::vector<at::Tensor> AllParameters(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> all;
  for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    all.insert(all.end(), group.params().begin(), group.params().end());
  }
  return all;
}

absl::Status CheckSameParameters(const torch::optim::Optimizer& a, const torch::optim::Optimizer& b,
                                 absl::string_view who) {
  if (a.param_groups().size() != b.param_groups().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": the optimizer factory made ", a.param_groups().size(),
                     " parameter groups, then ", b.param_groups().size(),
                     "; it must make the same optimizer over the same tensors each time"));
  }
  for (size_t g = 0; g < a.param_groups().size(); ++g) {
    const std::vector<at::Tensor>& pa = a.param_groups()[g].params();
    const std::vector<at::Tensor>& pb = b.param_groups()[g].params();
    bool same = pa.size() == pb.size();
    for (size_t i = 0; same && i < pa.size(); ++i) same = pa[i].is_same(pb[i]);
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": the optimizer factory's parameter group ", g,
          " held other tensors the second time; it must make an optimizer over the same "
          "parameter tensors each time"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
