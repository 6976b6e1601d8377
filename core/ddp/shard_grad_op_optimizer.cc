// ShardGradOpOptimizer: the shard's optimizer over the reducer's rows, the step and the all-gather,
// and the unsharded state in and out (see shard_grad_op_optimizer.h).
#include "core/ddp/shard_grad_op_optimizer.h"

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerParamGroup;

constexpr char kWho[] = "ShardGradOpOptimizer";

// `state`'s tensors replaced by their rows that `rank` owns, copied (so that the whole state can be
// freed).
absl::StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> RowsOfState(
    const torch::optim::OptimizerParamState& state, int rank, int world) {
  std::unique_ptr<torch::optim::OptimizerParamState> rows = state.clone();
  RETURN_IF_ERROR(MapOptimizerStateTensors(
      *rows, [rank, world](const at::Tensor& t) { return OwnedRows(t, rank, world).clone(); }));
  return rows;
}

// The tensors of `all` at `indices`, detached (they share the storage).
std::vector<at::Tensor> Members(const std::vector<at::Tensor>& all,
                                const std::vector<size_t>& indices) {
  std::vector<at::Tensor> members;
  members.reserve(indices.size());
  for (size_t i : indices) members.push_back(all[i].detach());
  return members;
}

}  // namespace

ShardGradOpOptimizer::ShardGradOpOptimizer(const std::vector<OptimizerParamGroup>& groups,
                                           std::unique_ptr<torch::optim::OptimizerOptions> defaults,
                                           OptimizerFactory make, DistributedDataParallel& ddp)
    : ShardedOptimizer(groups, std::move(defaults), std::move(make), &ddp.group(), kWho),
      reducer_(&ddp.reducer()) {}

absl::StatusOr<std::unique_ptr<ShardGradOpOptimizer>> ShardGradOpOptimizer::Create(
    OptimizerFactory make, DistributedDataParallel& ddp) {
  const Reducer& reducer = ddp.reducer();
  if (reducer.shard_parameters().empty()) {
    return absl::InvalidArgumentError(
        "ShardGradOpOptimizer needs a DistributedDataParallel wrapped with "
        "reducer.shard_gradients (each rank keeps its rows of the gradients)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> full, make());
  std::unordered_map<const void*, size_t> reduced;
  for (size_t i = 0; i < reducer.tensors().size(); ++i) {
    reduced[reducer.tensors()[i].unsafeGetTensorImpl()] = i;
  }
  const std::vector<at::Tensor> parameters = AllParameters(*full);
  if (parameters.empty()) return absl::InvalidArgumentError("ShardGradOpOptimizer: no parameters");
  std::vector<OptimizerParamGroup> groups;
  for (const OptimizerParamGroup& g : full->param_groups()) groups.emplace_back(g);
  auto sharded = std::unique_ptr<ShardGradOpOptimizer>(
      new ShardGradOpOptimizer(groups, full->defaults().clone(), std::move(make), ddp));
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto found = reduced.find(parameters[i].unsafeGetTensorImpl());
    if (found == reduced.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ShardGradOpOptimizer: the optimizer's parameter ", i, " (",
          c10::str(parameters[i].sizes()),
          ") is not one that the DistributedDataParallel reduces; shard an optimizer over the "
          "wrapped module's trainable parameters"));
    }
    sharded->rows_.push_back(reducer.shard_parameters()[found->second]);
    sharded->shard_elements_ += sharded->rows_.back().numel();
  }
  ASSIGN_OR_RETURN(sharded->shard_, sharded->MakeShard(sharded->rows_));
  RETURN_IF_ERROR(sharded->AdoptState(*full));  // Adagrad made its state when it was built
  // Gathered in buckets of the reducer's size: one bucket of whole parameters at a time (not under
  // full_shard, whose units gather them).
  if (reducer.shard_parameters_detached()) {
    sharded->stepped_after_ = reducer.synchronized_backwards();
    return sharded;
  }
  const auto cap = static_cast<size_t>(reducer.options().bucket_cap_mb * 1024 * 1024);
  sharded->gather_buckets_ = AssignBuckets(parameters, cap, cap);
  for (const std::vector<size_t>& bucket : sharded->gather_buckets_) {
    sharded->gather_layouts_.emplace_back(Members(parameters, bucket),
                                          sharded->group_->world_size());
  }
  sharded->stepped_after_ = reducer.synchronized_backwards();
  return sharded;
}

absl::StatusOr<std::unique_ptr<Optimizer>> ShardGradOpOptimizer::MakeShard(
    const std::vector<at::Tensor>& rows) const {
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> shard, make_());
  RETURN_IF_ERROR(CheckSameParameters(*this, *shard, kWho));
  size_t index = 0;
  for (OptimizerParamGroup& g : shard->param_groups()) {
    for (at::Tensor& p : g.params()) p = rows[index++];
  }
  shard->state().clear();  // keyed by the whole parameters
  return shard;
}

absl::Status ShardGradOpOptimizer::AdoptState(const Optimizer& full) {
  const std::vector<at::Tensor> parameters = AllParameters(full);
  shard_->state().clear();
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto found = full.state().find(parameters[i].unsafeGetTensorImpl());
    if (found == full.state().end()) continue;
    ASSIGN_OR_RETURN(shard_->state()[rows_[i].unsafeGetTensorImpl()],
                     RowsOfState(*found->second, group_->rank(), group_->world_size()));
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    param_groups_[g].set_options(full.param_groups()[g].options().clone());
    shard_->param_groups()[g].set_options(full.param_groups()[g].options().clone());
  }
  return absl::OkStatus();
}

absl::Status ShardGradOpOptimizer::Step() {
  const int64_t backwards = reducer_->synchronized_backwards();
  if (backwards == stepped_after_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ShardGradOpOptimizer: rank ", group_->rank(),
        " has no averaged gradients since its last step; under no_sync the gradients are not "
        "reduced yet: step after the synchronized backward that ends the accumulation"));
  }
  stepped_after_ = backwards;
  RETURN_IF_ERROR(StepShard(*shard_));
  // Under full_shard the rows stepped are the only copy of the parameters between steps: the next
  // forward gathers them (full_shard.h).
  if (reducer_->shard_parameters_detached()) return absl::OkStatus();
  return AllGatherParameters();
}

absl::Status ShardGradOpOptimizer::AllGatherParameters() {
  const std::vector<at::Tensor> parameters = AllParameters(*this);
  const int rank = group_->rank(), world = group_->world_size();
  for (size_t b = 0; b < gather_buckets_.size(); ++b) {
    const SectionLayout& layout = gather_layouts_[b];
    const std::vector<at::Tensor> members = Members(parameters, gather_buckets_[b]);
    at::Tensor mine = at::empty({layout.section_elements()}, members[0].options());
    layout.Pack(members, rank, mine);
    at::Tensor all = at::empty({world * layout.section_elements()}, mine.options());
    absl::Status gathered = group_->AllGatherInto(mine, all);
    if (!gathered.ok()) {
      return absl::Status(gathered.code(),
                          absl::StrCat("ShardGradOpOptimizer: all-gather of ", "parameter bucket ",
                                       b, ": ", gathered.message()));
    }
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      layout.Unpack(all.narrow(0, r * layout.section_elements(), layout.section_elements()), r,
                    members);
    }
  }
  return absl::OkStatus();
}

absl::Status ShardGradOpOptimizer::ConsolidateStateDict(int to) {
  ASSIGN_OR_RETURN(std::vector<std::string> shards, GatherShardStates(*shard_, to));
  const int world = group_->world_size();
  if (group_->rank() != to) return absl::OkStatus();
  const std::vector<at::Tensor> parameters = AllParameters(*this);
  // Every rank's shard, loaded into an optimizer over that rank's rows (shaped only: on the meta
  // device, as the parameters may be freed under full_shard).
  std::vector<std::unique_ptr<Optimizer>> loaded;
  std::vector<std::vector<at::Tensor>> rows_of(world);
  for (int r = 0; r < world; ++r) {
    for (const at::Tensor& p : parameters) {
      rows_of[r].push_back(
          OwnedRows(at::empty(p.sizes(), p.options().device(at::kMeta)), r, world));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> shard, MakeShard(rows_of[r]));
    RETURN_IF_ERROR(LoadShardState(*shard, shards[r], r));
    loaded.push_back(std::move(shard));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> full, make_());
  RETURN_IF_ERROR(CheckSameParameters(*this, *full, kWho));
  full->state().clear();
  for (size_t i = 0; i < parameters.size(); ++i) {
    // The whole state of parameter i: its rows from every rank, stacked in rank order.
    std::vector<std::vector<at::Tensor>> per_rank;
    for (int r = 0; r < world; ++r) {
      auto found = loaded[r]->state().find(rows_of[r][i].unsafeGetTensorImpl());
      if (found == loaded[r]->state().end()) break;
      ASSIGN_OR_RETURN(std::vector<at::Tensor> tensors, OptimizerStateTensors(*found->second));
      per_rank.push_back(std::move(tensors));
    }
    if (per_rank.empty()) continue;  // never stepped (a parameter no rank used)
    if (per_rank.size() != static_cast<size_t>(world)) {
      return absl::InternalError(
          absl::StrCat("ShardGradOpOptimizer: parameter ", i, " has state on some ranks only"));
    }
    std::unique_ptr<torch::optim::OptimizerParamState> whole =
        loaded[0]->state().at(rows_of[0][i].unsafeGetTensorImpl())->clone();
    size_t k = 0;
    const at::IntArrayRef shape = parameters[i].sizes();
    RETURN_IF_ERROR(MapOptimizerStateTensors(*whole, [&](const at::Tensor&) {
      std::vector<at::Tensor> rows;
      rows.reserve(per_rank.size());
      for (const std::vector<at::Tensor>& tensors : per_rank) rows.push_back(tensors[k]);
      ++k;
      return at::cat(rows).view(shape);
    }));
    full->state()[parameters[i].unsafeGetTensorImpl()] = std::move(whole);
  }
  KeepConsolidated(std::move(full));
  return absl::OkStatus();
}

absl::StatusOr<ShardGradOpOptimizer::SavedShard> ShardGradOpOptimizer::ReadSavedShard(
    torch::serialize::InputArchive& archive, int rank, int world) const {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": no rank ", rank, " of ", world));
  }
  SavedShard saved;
  for (const at::Tensor& p : AllParameters(*this)) {
    saved.rows.push_back(
        OwnedRows(at::empty(p.sizes(), p.options().device(at::kMeta)), rank, world));
  }
  ASSIGN_OR_RETURN(saved.optimizer, MakeShard(saved.rows));
  RETURN_IF_ERROR(
      StatusOnException(absl::StrCat(kWho, ": the saved state of rank ", rank, " of ", world), [&] {
        saved.optimizer->load(archive);
        return absl::OkStatus();
      }));
  return saved;
}

absl::Status ShardGradOpOptimizer::AdoptShardState(
    std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states,
    const Optimizer& options_from) {
  if (states.size() != rows_.size() || options_from.param_groups().size() != param_groups_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": a state for ", states.size(), " parameters in ",
                     options_from.param_groups().size(), " groups, but this optimizer has ",
                     rows_.size(), " in ", param_groups_.size()));
  }
  shard_->state().clear();
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (states[i] != nullptr)
      shard_->state()[rows_[i].unsafeGetTensorImpl()] = std::move(states[i]);
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    param_groups_[g].set_options(options_from.param_groups()[g].options().clone());
    shard_->param_groups()[g].set_options(options_from.param_groups()[g].options().clone());
  }
  return absl::OkStatus();
}

absl::Status ShardGradOpOptimizer::GatherParameters() {
  if (reducer_->shard_parameters_detached()) return absl::OkStatus();
  return AllGatherParameters();
}

void ShardGradOpOptimizer::load(torch::serialize::InputArchive& archive) {
  const absl::Status adopted = AdoptState(*LoadUnsharded(archive));
  TORCH_CHECK(adopted.ok(), adopted.ToString());
}

}  // namespace ddpspawn
