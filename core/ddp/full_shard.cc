// FullShard: units built from the modules given, parameters freed and gathered in place in their
// storage, and the autograd hooks that gather before a unit's backward and free after it (see
// full_shard.h).
#include "core/ddp/full_shard.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/exception_status.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

struct FullShard::Hooks {
  // Held strongly, as the reducer holds them: a tensor keeps only a weak reference to its own.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> handles;
};

namespace {

constexpr size_t kNoUnit = static_cast<size_t>(-1);

int64_t StorageBytesOf(const at::Tensor& t) { return t.numel() * t.element_size(); }

// Frees `t`'s storage in place: every tensor over it (autograd's saved views included) stays, with
// no bytes behind it, until AllocateStorage().
void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
}

// Gives `t`'s freed storage its bytes again (uninitialized), from the allocator that made it, or
// the device's (a TorchScript model's parameters come from its archive, with no allocator).
void AllocateStorage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<size_t>(StorageBytesOf(t));
  at::Allocator* allocator = storage->allocator() != nullptr
                                 ? storage->allocator()
                                 : c10::GetAllocator(storage->device_type());
  storage->set_data_ptr_noswap(allocator->allocate(bytes));
  storage->set_nbytes(bytes);
}

// A tensor on the meta device shaped like `t`: its rows can be taken while `t` is freed.
at::Tensor MetaLike(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kMeta).requires_grad(false));
}

// OK when freeing `parameter`'s storage frees its data and nothing else's.
absl::Status CheckOwnStorage(const at::Tensor& parameter, const std::string& name) {
  const c10::Storage& storage = parameter.storage();
  std::string why;
  if (!parameter.is_contiguous() || parameter.storage_offset() != 0 ||
      static_cast<int64_t>(storage.nbytes()) != StorageBytesOf(parameter)) {
    why = "it is a view of a larger storage";
  } else if (storage.use_count() != 1) {
    why = absl::StrCat("its storage is shared by ", storage.use_count(), " tensors");
  }
  if (why.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "full_shard: parameter '", name, "' does not own its storage alone (", why,
      "); freeing it between steps would free other data: give it its own storage (clone it) "
      "before wrapping"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<FullShard>> FullShard::Wrap(
    std::shared_ptr<torch::nn::Module> module,
    const std::vector<std::shared_ptr<torch::nn::Module>>& units, ProcessGroup* group,
    const FullShardOptions& options) {
  if (module == nullptr) return absl::InvalidArgumentError("full_shard: no module");
  if (units.empty()) return absl::InvalidArgumentError("full_shard: no units");
  // The parameters the wrapper reduces (DistributedDataParallel's: those that require grad), each
  // to the innermost unit that holds it: the one holding the fewest.
  Plan plan;
  for (const at::Tensor& p : module->parameters(/*recurse=*/true)) {
    if (p.requires_grad()) plan.trainable.push_back(p);
  }
  std::unordered_map<const void*, size_t> reduced;
  for (size_t i = 0; i < plan.trainable.size(); ++i) {
    reduced[plan.trainable[i].unsafeGetTensorImpl()] = i;
  }
  const auto named = module->named_parameters(/*recurse=*/true);
  for (const at::Tensor& p : plan.trainable) {
    std::string name = "?";
    for (const auto& item : named) {
      if (item.value().unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) name = item.key();
    }
    plan.names.push_back(std::move(name));
  }
  plan.owner.assign(plan.trainable.size(), kNoUnit);
  std::vector<size_t> unit_size(units.size());
  std::vector<std::vector<size_t>> held(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u] == nullptr) return absl::InvalidArgumentError("full_shard: a unit is null");
    plan.unit_modules.push_back(units[u].get());
    for (const at::Tensor& p : units[u]->parameters(/*recurse=*/true)) {
      auto found = reduced.find(p.unsafeGetTensorImpl());
      if (found != reduced.end()) held[u].push_back(found->second);
    }
    unit_size[u] = held[u].size();
  }
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t i : held[u]) {
      size_t& owner = plan.owner[i];
      if (owner == kNoUnit || unit_size[u] < unit_size[owner]) {
        owner = u;
      } else if (unit_size[u] == unit_size[owner]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "full_shard: units ", owner, " and ", u, " both hold parameter '", plan.names[i],
            "' and neither is nested in the other (a module listed twice?)"));
      }
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<FullShard> shard, Build(
                                                         std::move(plan),
                                                         [&](const DdpOptions& ddp_options) {
                                                           return DistributedDataParallel::Wrap(
                                                               module, group, ddp_options);
                                                         },
                                                         group, options));
  shard->module_ = std::move(module);
  return shard;
}

absl::StatusOr<std::unique_ptr<FullShard>> FullShard::Wrap(
    std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers,
    const std::vector<std::vector<at::Tensor>>& units, ProcessGroup* group,
    const FullShardOptions& options) {
  if (units.empty()) return absl::InvalidArgumentError("full_shard: no units");
  std::unordered_map<const void*, size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u) {
    for (const at::Tensor& p : units[u]) {
      auto [at, added] = unit_of.emplace(p.unsafeGetTensorImpl(), u);
      if (!added) {
        return absl::InvalidArgumentError(
            absl::StrCat("full_shard: units ", at->second, " and ", u, " both hold a parameter"));
      }
    }
  }
  Plan plan;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].requires_grad()) continue;
    plan.trainable.push_back(parameters[i]);
    plan.names.push_back(absl::StrCat("#", i));
    auto found = unit_of.find(parameters[i].unsafeGetTensorImpl());
    plan.owner.push_back(found == unit_of.end() ? kNoUnit : found->second);
  }
  plan.unit_modules.assign(units.size(), nullptr);
  return Build(
      std::move(plan),
      [&](const DdpOptions& ddp_options) {
        return DistributedDataParallel::Wrap(std::move(parameters), std::move(buffers), group,
                                             ddp_options);
      },
      group, options);
}

absl::StatusOr<std::unique_ptr<FullShard>> FullShard::Build(
    Plan plan,
    const std::function<
        absl::StatusOr<std::unique_ptr<DistributedDataParallel>>(const DdpOptions&)>& wrap,
    ProcessGroup* group, const FullShardOptions& options) {
  if (group == nullptr) return absl::InvalidArgumentError("full_shard needs a process group");
  const std::vector<at::Tensor>& trainable = plan.trainable;
  const size_t unit_count = plan.unit_modules.size();
  for (size_t i = 0; i < trainable.size(); ++i) {
    if (plan.owner[i] == kNoUnit) {
      return absl::InvalidArgumentError(
          absl::StrCat("full_shard: trainable parameter '", plan.names[i],
                       "' is in no unit; list a module that holds it (the root module to "
                       "gather it for the whole forward)"));
    }
    RETURN_IF_ERROR(CheckOwnStorage(trainable[i], plan.names[i]));
  }

  // One reduce-scatter bucket per unit (per dtype within it), last unit first, as backward reaches
  // them: at most one unit's full gradients wait for their reduce-scatter.
  DdpOptions ddp_options = options.ddp;
  ddp_options.reducer.shard_gradients = true;
  ddp_options.reducer.buckets.clear();
  for (size_t u = unit_count; u-- > 0;) {
    std::map<at::ScalarType, std::vector<size_t>> by_dtype;
    for (size_t i = trainable.size(); i-- > 0;) {
      if (plan.owner[i] == u) by_dtype[trainable[i].scalar_type()].push_back(i);
    }
    for (auto& [dtype, members] : by_dtype) ddp_options.reducer.buckets.push_back(members);
  }
  auto shard = std::unique_ptr<FullShard>(new FullShard());
  shard->group_ = group;
  shard->options_ = options;
  ASSIGN_OR_RETURN(shard->ddp_, wrap(ddp_options));
  Reducer& reducer = shard->ddp_->reducer();
  bool same = reducer.tensors().size() == trainable.size();
  for (size_t i = 0; same && i < trainable.size(); ++i) {
    same = reducer.tensors()[i].unsafeGetTensorImpl() == trainable[i].unsafeGetTensorImpl();
  }
  if (!same) {
    return absl::InternalError("full_shard: the wrapper reduces other parameters than expected");
  }
  RETURN_IF_ERROR(reducer.DetachShardParameters());

  const int world = group->world_size();
  std::vector<Unit> built(unit_count);
  for (size_t i = 0; i < trainable.size(); ++i) {
    Unit& unit = built[plan.owner[i]];
    unit.parameters.push_back(reducer.tensors()[i].variable_data());
    unit.shapes.push_back(MetaLike(reducer.tensors()[i]));
    unit.shards.push_back(reducer.shard_parameters()[i]);
    unit.gradient_indices.push_back(i);
    unit.bytes += StorageBytesOf(reducer.tensors()[i]);
  }
  {
    absl::MutexLock lock(&shard->mutex_);
    shard->order_ = UnitOrder(unit_count);
    for (size_t u = 0; u < unit_count; ++u) {
      built[u].module = plan.unit_modules[u];
      if (!built[u].parameters.empty()) {
        built[u].layout = std::make_unique<SectionLayout>(built[u].shapes, world);
      }
      built[u].whole = true;
      shard->whole_bytes_ += built[u].bytes;
      shard->units_.push_back(std::move(built[u]));
      shard->Reshard(shard->units_.back());
    }
  }
  RETURN_IF_ERROR(shard->InstallHooks());
  return shard;
}

FullShard::~FullShard() {
  {
    absl::MutexLock lock(&mutex_);
    for (Unit& u : units_) {
      if (u.arriving) DiscardGather(u);
    }
  }
  if (hooks_) {
    for (size_t i = 0; i < hooks_->accumulators.size(); ++i) {
      hooks_->accumulators[i]->del_post_hook(hooks_->handles[i]);
    }
  }
}

absl::Status FullShard::InstallHooks() {
  hooks_ = std::make_unique<Hooks>();
  const std::vector<at::Tensor>& parameters = ddp_->reducer().tensors();
  std::vector<size_t> unit_of(parameters.size());
  {
    absl::MutexLock lock(&mutex_);
    for (size_t u = 0; u < units_.size(); ++u) {
      for (size_t i : units_[u].gradient_indices) unit_of[i] = u;
    }
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(parameters[i]);
    if (accumulator == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", i, " is not a leaf tensor"));
    }
    const size_t unit = unit_of[i];
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, unit](const torch::autograd::variable_list& outputs,
                     const torch::autograd::variable_list&) {
          AfterGradient(unit);
          return outputs;
        });
    hooks_->handles.push_back(accumulator->add_post_hook(std::move(hook)));
    hooks_->accumulators.push_back(std::move(accumulator));
  }
  return absl::OkStatus();
}

absl::Status FullShard::Gather(Unit& unit) {
  RETURN_IF_ERROR(StartGather(unit));
  return FinishGather(unit);
}

absl::Status FullShard::StartGather(Unit& unit) {
  if (unit.whole || unit.arriving) return absl::OkStatus();
  if (unit.parameters.empty()) {
    unit.whole = true;
    return absl::OkStatus();
  }
  const int rank = group_->rank(), world = group_->world_size();
  const int64_t section = unit.layout->section_elements();
  at::NoGradGuard no_grad;
  at::Tensor mine = at::zeros({section}, unit.shards[0].options().requires_grad(false));
  std::vector<at::Tensor> views = unit.layout->Views(mine, rank, unit.shapes);
  for (size_t i = 0; i < views.size(); ++i) views[i].copy_(unit.shards[i].detach());
  at::Tensor all = at::empty({world * section}, mine.options());
  absl::StatusOr<std::unique_ptr<PendingWork>> started = group_->StartAllGatherInto(mine, all);
  if (!started.ok()) {
    return absl::Status(
        started.status().code(),
        absl::StrCat("full_shard: rank ", rank, ": all-gather of unit ", &unit - units_.data(),
                     "'s parameters: ", started.status().message()));
  }
  unit.arriving = *std::move(started);
  unit.sent = std::move(mine);
  unit.received = std::move(all);
  whole_bytes_ += unit.bytes;
  peak_whole_bytes_ = std::max(peak_whole_bytes_, whole_bytes_);
  return absl::OkStatus();
}

absl::Status FullShard::FinishGather(Unit& unit) {
  if (!unit.arriving) return absl::OkStatus();
  absl::Status gathered = unit.arriving->Wait();
  unit.arriving.reset();
  at::Tensor all = std::move(unit.received);
  unit.sent = at::Tensor();
  unit.received = at::Tensor();
  const int rank = group_->rank(), world = group_->world_size();
  if (!gathered.ok()) {
    whole_bytes_ -= unit.bytes;
    return absl::Status(gathered.code(),
                        absl::StrCat("full_shard: rank ", rank, ": all-gather of unit ",
                                     &unit - units_.data(), "'s parameters: ", gathered.message()));
  }
  at::NoGradGuard no_grad;
  const int64_t section = unit.layout->section_elements();
  for (const at::Tensor& p : unit.parameters) AllocateStorage(p);
  for (int r = 0; r < world; ++r) {
    unit.layout->Unpack(all.narrow(0, r * section, section), r, unit.parameters);
  }
  unit.whole = true;
  return absl::OkStatus();
}

absl::Status FullShard::Prefetch(size_t next, bool in_backward) {
  // One rank gathers from nobody: nothing to hide.
  if (!options_.prefetch || next == kNoUnit || group_->world_size() == 1) return absl::OkStatus();
  Unit& unit = units_[next];
  if (unit.whole || unit.arriving || unit.parameters.empty()) return absl::OkStatus();
  const int64_t sent_bytes = unit.layout->section_elements() * unit.shards[0].element_size();
  if (group_->AllGathersInSharedMemory(sent_bytes, unit.shards[0].device().is_cpu())) {
    return absl::OkStatus();
  }
  ++(in_backward ? prefetched_.backward : prefetched_.forward);
  return StartGather(unit);
}

void FullShard::DiscardGather(Unit& unit) {
  absl::Status waited = unit.arriving->Wait();
  unit.arriving.reset();
  unit.sent = at::Tensor();
  unit.received = at::Tensor();
  whole_bytes_ -= unit.bytes;
  if (!waited.ok() && deferred_error_.ok()) {
    deferred_error_ = absl::Status(
        waited.code(),
        absl::StrCat("full_shard: rank ", group_->rank(), ": all-gather of unit ",
                     &unit - units_.data(), "'s parameters, started ahead: ", waited.message()));
  }
}

absl::Status FullShard::TakeDeferredError() {
  absl::Status error = std::move(deferred_error_);
  deferred_error_ = absl::OkStatus();
  return error;
}

void FullShard::Reshard(Unit& unit) {
  // A gather started ahead and never used: its collective is under way on every rank.
  if (unit.arriving) DiscardGather(unit);
  if (!unit.whole) return;
  for (const at::Tensor& p : unit.parameters) FreeStorage(p);
  whole_bytes_ -= unit.bytes;
  unit.whole = false;
  unit.awaiting_gradients = 0;
}

size_t FullShard::BackwardPrefetchTarget(size_t unit) {
  const size_t before = order_.NoteBackward(unit);
  return before == UnitOrder::kNone || units_[before].backward_started ? kNoUnit : before;
}

absl::StatusOr<at::Tensor> FullShard::Forward(size_t unit,
                                              const std::function<at::Tensor()>& forward) {
  {
    absl::MutexLock lock(&mutex_);
    if (unit >= units_.size()) {
      return absl::OutOfRangeError(absl::StrCat("full_shard: unit ", unit, " of ", units_.size()));
    }
    RETURN_IF_ERROR(TakeDeferredError());
    const size_t next =
        at::GradMode::is_enabled() ? order_.NoteForward(unit, forwards_running_) : kNoUnit;
    // A gather started ahead for another unit than this one was a wrong guess (outside backward,
    // whose own are still to be used): drop it rather than keep it whole.
    for (Unit& u : units_) {
      if (u.arriving && &u != &units_[unit] && !end_of_backward_queued_) DiscardGather(u);
    }
    RETURN_IF_ERROR(Gather(units_[unit]));
    if (absl::Status prefetched = Prefetch(next, /*in_backward=*/false); !prefetched.ok()) {
      if (all_pinned_ == 0) Reshard(units_[unit]);
      return prefetched;
    }
    ++forwards_running_;
  }
  at::Tensor output;
  absl::Status ran = StatusOnException(absl::StrCat("unit ", unit, "'s forward"), [&] {
    output = forward();
    return absl::OkStatus();
  });
  const bool training =
      at::GradMode::is_enabled() && ran.ok() && output.defined() && output.requires_grad();
  if (training) {
    output.register_hook([this, unit](const at::Tensor&) { BeforeBackward(unit); });
  }
  absl::MutexLock lock(&mutex_);
  --forwards_running_;
  if (all_pinned_ == 0 && (!training || options_.reshard_after_forward)) Reshard(units_[unit]);
  if (!ran.ok()) return ran;
  return output;
}

absl::StatusOr<at::Tensor> FullShard::ForwardSequential(torch::nn::SequentialImpl& net,
                                                        at::Tensor input) {
  absl::StatusOr<size_t> self = UnitOf(net);
  if (!self.ok()) return ForwardChildren(net, std::move(input));
  absl::Status children = absl::OkStatus();
  ASSIGN_OR_RETURN(at::Tensor output, Forward(*self, [&]() -> at::Tensor {
                     absl::StatusOr<at::Tensor> x = ForwardChildren(net, input);
                     if (!x.ok()) {
                       children = x.status();
                       return at::Tensor();
                     }
                     return *std::move(x);
                   }));
  RETURN_IF_ERROR(children);
  return output;
}

absl::StatusOr<at::Tensor> FullShard::ForwardChildren(torch::nn::SequentialImpl& net,
                                                      at::Tensor input) {
  at::Tensor x = std::move(input);
  for (torch::nn::AnyModule& child : net) {
    absl::StatusOr<size_t> unit = UnitOf(*child.ptr());
    if (unit.ok()) {
      ASSIGN_OR_RETURN(x, Forward(*unit, [&child, &x] { return child.forward(x); }));
    } else {
      RETURN_IF_ERROR(StatusOnException("a child's forward", [&] {
        x = child.forward(x);
        return absl::OkStatus();
      }));
    }
  }
  return x;
}

void FullShard::BeforeBackward(size_t unit) {
  absl::MutexLock lock(&mutex_);
  if (!end_of_backward_queued_) {
    end_of_backward_queued_ = true;
    // Whatever is still whole when backward ends (a unit with a parameter no gradient reached).
    torch::autograd::Engine::get_default_engine().queue_callback([this] {
      absl::MutexLock lock(&mutex_);
      end_of_backward_queued_ = false;
      order_.EndBackward();
      for (Unit& u : units_) {
        u.awaiting_gradients = 0;
        u.backward_started = false;
        if (all_pinned_ == 0) Reshard(u);
      }
    });
  }
  Unit& u = units_[unit];
  u.backward_started = true;
  absl::Status gathered = Gather(u);
  if (gathered.ok()) gathered = Prefetch(BackwardPrefetchTarget(unit), /*in_backward=*/true);
  if (!gathered.ok()) throw std::runtime_error(std::string(gathered.message()));
  u.awaiting_gradients = static_cast<int>(u.parameters.size());
}

void FullShard::AfterGradient(size_t unit) {
  absl::MutexLock lock(&mutex_);
  Unit& u = units_[unit];
  if (u.awaiting_gradients > 0 && --u.awaiting_gradients == 0 && all_pinned_ == 0) Reshard(u);
}

absl::Status FullShard::GatherAll(int only_rank) {
  absl::MutexLock lock(&mutex_);
  RETURN_IF_ERROR(TakeDeferredError());
  const bool here = only_rank < 0 || only_rank == group_->rank();
  for (Unit& u : units_) {
    const bool was_whole = u.whole;
    RETURN_IF_ERROR(Gather(u));
    // Elsewhere each unit is gathered with the others (a collective) and freed at once.
    if (!here && !was_whole) Reshard(u);
  }
  pins_.push_back(here);
  if (here) ++all_pinned_;
  return absl::OkStatus();
}

absl::Status FullShard::ReshardAll() {
  absl::MutexLock lock(&mutex_);
  if (pins_.empty()) {
    return absl::FailedPreconditionError("full_shard: ReshardAll() without a GatherAll()");
  }
  const bool here = pins_.back();
  pins_.pop_back();
  if (!here) return absl::OkStatus();
  if (--all_pinned_ > 0) return absl::OkStatus();
  const int rank = group_->rank(), world = group_->world_size();
  at::NoGradGuard no_grad;
  for (Unit& u : units_) {
    for (size_t i = 0; i < u.parameters.size(); ++i) {
      u.shards[i].detach().copy_(OwnedRows(u.parameters[i], rank, world));
    }
    Reshard(u);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardGradOpOptimizer>> FullShard::MakeOptimizer(
    OptimizerFactory make) {
  return ShardGradOpOptimizer::Create(std::move(make), *ddp_);
}

absl::StatusOr<size_t> FullShard::UnitOf(const torch::nn::Module& module) const {
  absl::MutexLock lock(&mutex_);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].module == &module) return u;
  }
  return absl::NotFoundError("not a unit of this FullShard");
}

int64_t FullShard::WholeParameterBytes() const {
  absl::MutexLock lock(&mutex_);
  return whole_bytes_;
}

FullShard::PrefetchCounts FullShard::prefetched_gathers() const {
  absl::MutexLock lock(&mutex_);
  return prefetched_;
}

int64_t FullShard::peak_whole_parameter_bytes() const {
  absl::MutexLock lock(&mutex_);
  return peak_whole_bytes_;
}

void FullShard::ResetPeakWholeParameterBytes() {
  absl::MutexLock lock(&mutex_);
  peak_whole_bytes_ = whole_bytes_;
}

}  // namespace ddpspawn
