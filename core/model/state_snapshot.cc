// StateSnapshot: copies of a module's and an optimizer's tensors (see state_snapshot.h).
#include "core/model/state_snapshot.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <array>
#include <sstream>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

namespace {

// One parameter group of an optimizer: its options, and each parameter's state (null: none yet).
struct GroupCopy {
  std::unique_ptr<OptimizerOptions> options;
  std::vector<std::unique_ptr<OptimizerParamState>> states;
};

// `from`'s values in `into`'s memory when it has the same shape, type and device (a snapshot taken
// again, a state restored again: no allocation), else in new memory.
at::Tensor CopyInto(const at::Tensor& from, const at::Tensor& into) {
  if (!from.defined()) return from;
  if (into.defined() && !into.is_same(from) && into.sizes().equals(from.sizes()) &&
      into.dtype() == from.dtype() && into.device() == from.device()) {
    at::Tensor target = into;
    target.copy_(from);
    return target;
  }
  return from.detach().clone();
}

// A copy of `from` (of type State) that shares no tensor with it, its tensors (`tensors_of`'s)
// copied into those of `previous` where it is a State too.
template <typename State, typename TensorsOf>
std::unique_ptr<OptimizerParamState> CopyState(const OptimizerParamState& from,
                                               OptimizerParamState* previous,
                                               TensorsOf tensors_of) {
  // Its scalars; its tensors are from's for now.
  auto copy = std::make_unique<State>(static_cast<const State&>(from));
  auto* old = previous != nullptr && typeid(*previous) == typeid(State)
                  ? static_cast<State*>(previous)
                  : nullptr;
  const auto fields = tensors_of(*copy);
  for (size_t i = 0; i < fields.size(); ++i) {
    *fields[i] = CopyInto(*fields[i], old != nullptr ? *tensors_of(*old)[i] : at::Tensor());
  }
  return copy;
}

// A copy of `state` that shares no tensor with it (reusing `previous`'s memory where it can); null
// for a type not known here. Exact types only: a state derived from one of these may hold more than
// it, which a copy of the base would drop.
std::unique_ptr<OptimizerParamState> DeepCopy(const OptimizerParamState& state,
                                              OptimizerParamState* previous) {
  using torch::optim::AdagradParamState;
  using torch::optim::AdamParamState;
  using torch::optim::AdamWParamState;
  using torch::optim::RMSpropParamState;
  using torch::optim::SGDParamState;
  const std::type_info& type = typeid(state);
  const auto adam_tensors = [](auto& s) {
    return std::array<at::Tensor*, 3>{&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()};
  };
  if (type == typeid(AdamParamState)) {
    return CopyState<AdamParamState>(state, previous, adam_tensors);
  }
  if (type == typeid(AdamWParamState)) {
    return CopyState<AdamWParamState>(state, previous, adam_tensors);
  }
  if (type == typeid(SGDParamState)) {
    return CopyState<SGDParamState>(state, previous, [](SGDParamState& s) {
      return std::array<at::Tensor*, 1>{&s.momentum_buffer()};
    });
  }
  if (type == typeid(RMSpropParamState)) {
    return CopyState<RMSpropParamState>(state, previous, [](RMSpropParamState& s) {
      return std::array<at::Tensor*, 3>{&s.square_avg(), &s.momentum_buffer(), &s.grad_avg()};
    });
  }
  if (type == typeid(AdagradParamState)) {
    return CopyState<AdagradParamState>(
        state, previous, [](AdagradParamState& s) { return std::array<at::Tensor*, 1>{&s.sum()}; });
  }
  return nullptr;
}

// The optimizer's groups copied by type into `groups` (reusing the memory of what they held); false
// when some state's type is not one DeepCopy knows.
bool CopyOptimizerByType(torch::optim::Optimizer& optimizer, std::vector<GroupCopy>& groups) {
  std::vector<GroupCopy> copied;
  const std::vector<torch::optim::OptimizerParamGroup>& now = optimizer.param_groups();
  for (size_t g = 0; g < now.size(); ++g) {
    GroupCopy& into = copied.emplace_back();
    if (now[g].has_options()) into.options = now[g].options().clone();
    for (size_t p = 0; p < now[g].params().size(); ++p) {
      const auto found = optimizer.state().find(now[g].params()[p].unsafeGetTensorImpl());
      if (found == optimizer.state().end()) {
        into.states.emplace_back();
        continue;
      }
      OptimizerParamState* previous =
          g < groups.size() && p < groups[g].states.size() ? groups[g].states[p].get() : nullptr;
      std::unique_ptr<OptimizerParamState> state = DeepCopy(*found->second, previous);
      if (state == nullptr) return false;
      into.states.push_back(std::move(state));
    }
  }
  groups = std::move(copied);
  return true;
}

absl::Status RestoreOptimizerByType(const std::vector<GroupCopy>& groups,
                                    torch::optim::Optimizer& optimizer) {
  std::vector<torch::optim::OptimizerParamGroup>& now = optimizer.param_groups();
  if (now.size() != groups.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the optimizer has ", now.size(), " parameter groups; the snapshot has ", groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (now[g].params().size() != groups[g].states.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameter group ", g, " has ", now[g].params().size(),
                       " parameters; the snapshot has ", groups[g].states.size()));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].options != nullptr) now[g].set_options(groups[g].options->clone());
    for (size_t p = 0; p < groups[g].states.size(); ++p) {
      void* key = now[g].params()[p].unsafeGetTensorImpl();
      const auto live = optimizer.state().find(key);
      if (groups[g].states[p] == nullptr) {
        if (live != optimizer.state().end()) optimizer.state().erase(live);
      } else if (live == optimizer.state().end()) {
        optimizer.state()[key] = DeepCopy(*groups[g].states[p], nullptr);
      } else {
        live->second = DeepCopy(*groups[g].states[p], live->second.get());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RestoreWeights(const NamedTensors& weights, LightningModule& module) {
  NamedTensors targets = module.named_state();
  if (targets.size() != weights.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the module has ", targets.size(), " tensors; the snapshot has ", weights.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    auto& [name, target] = targets[i];
    const auto& [saved_name, saved] = weights[i];
    if (name != saved_name || !target.sizes().equals(saved.sizes())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the module's tensor '", name, "' of shape ", c10::str(target.sizes()),
          " is not the snapshot's '", saved_name, "' of shape ", c10::str(saved.sizes())));
    }
    target.copy_(saved);
  }
  return absl::OkStatus();
}

}  // namespace

struct StateSnapshot::Contents {
  NamedTensors weights;
  TrainingState state;
  bool has_optimizer = false;
  std::vector<GroupCopy> groups;
  std::string serialized_optimizer;  // instead of `groups`, for an optimizer not copied by type
};

StateSnapshot::StateSnapshot(std::shared_ptr<Contents> contents) : contents_(std::move(contents)) {}

absl::StatusOr<StateSnapshot> StateSnapshot::Take(LightningModule& module,
                                                  torch::optim::Optimizer* optimizer,
                                                  TrainingState state,
                                                  std::optional<StateSnapshot> recycled) {
  // The recycled snapshot's memory is written over only when nothing else holds it.
  std::shared_ptr<Contents> contents = recycled.has_value() && recycled->contents_.use_count() == 1
                                           ? std::move(recycled->contents_)
                                           : std::make_shared<Contents>();
  recycled.reset();
  RETURN_IF_ERROR(StatusOnException("copying the training state", [&]() -> absl::Status {
    c10::NoGradGuard no_grad;
    NamedTensors previous = std::move(contents->weights);
    contents->weights.clear();
    NamedTensors now = module.named_state();
    for (size_t i = 0; i < now.size(); ++i) {
      const bool same = i < previous.size() && previous[i].first == now[i].first;
      contents->weights.emplace_back(
          now[i].first, CopyInto(now[i].second, same ? previous[i].second : at::Tensor()));
    }
    contents->has_optimizer = optimizer != nullptr;
    contents->serialized_optimizer.clear();
    if (optimizer == nullptr) {
      contents->groups.clear();
    } else if (!CopyOptimizerByType(*optimizer, contents->groups)) {
      contents->groups.clear();
      torch::serialize::OutputArchive archive;
      optimizer->save(archive);
      std::ostringstream out;
      archive.save_to(out);
      contents->serialized_optimizer = std::move(out).str();
    }
    return absl::OkStatus();
  }));
  contents->state = std::move(state);
  return StateSnapshot(std::move(contents));
}

absl::Status StateSnapshot::Restore(LightningModule& module, torch::optim::Optimizer* optimizer,
                                    TrainingState* state) const {
  const Contents& saved = *contents_;
  RETURN_IF_ERROR(StatusOnException("restoring the training state", [&]() -> absl::Status {
    c10::NoGradGuard no_grad;
    RETURN_IF_ERROR(RestoreWeights(saved.weights, module));
    if (optimizer == nullptr) return absl::OkStatus();
    if (!saved.has_optimizer) {
      return absl::FailedPreconditionError("the snapshot holds no optimizer state");
    }
    if (saved.serialized_optimizer.empty()) return RestoreOptimizerByType(saved.groups, *optimizer);
    torch::serialize::InputArchive archive;
    std::istringstream in(saved.serialized_optimizer);
    archive.load_from(in);
    optimizer->load(archive);
    return absl::OkStatus();
  }));
  if (state != nullptr) *state = saved.state;
  return absl::OkStatus();
}

const TrainingState& StateSnapshot::training_state() const { return contents_->state; }

const NamedTensors& StateSnapshot::weights() const { return contents_->weights; }

bool StateSnapshot::optimizer_serialized() const {
  return !contents_->serialized_optimizer.empty();
}

}  // namespace ddpspawn
