// StateSnapshot (an elastic fit's commit): restoring it and training on gives, bit for bit, what
// restoring the same moment's serialized checkpoint gives, for each optimizer fit offers (copied
// tensor by tensor, not serialized) and for one it does not know (serialized); a recycled snapshot
// reuses its memory only when nothing else holds it; a module of another shape is refused.
#include "core/model/state_snapshot.h"

#include <ATen/ATen.h>
#include <torch/optim.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/train/models/mlp_module.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<LightningModule> Mlp(const std::string& spec = "mlp:6,16,3") {
  at::manual_seed(1);
  absl::StatusOr<std::shared_ptr<LightningModule>> module = MakeMlpModule(spec, true, {});
  EXPECT_TRUE(module.ok()) << module.status();
  return module.value_or(nullptr);
}

// One optimizer step on a loss that touches every parameter, the same for every call with the same
// weights.
void Step(LightningModule& module, torch::optim::Optimizer& optimizer) {
  optimizer.zero_grad();
  at::Tensor loss = at::zeros({});
  int64_t i = 0;
  for (const at::Tensor& parameter : module.parameters()) {
    loss = loss + (parameter * static_cast<double>(++i)).sin().pow(2).sum();
  }
  loss.backward();
  optimizer.step([&] { return loss; });
}

std::vector<at::Tensor> Weights(LightningModule& module) {
  std::vector<at::Tensor> weights;
  for (auto& [name, tensor] : module.named_state()) weights.push_back(tensor.detach().clone());
  return weights;
}

bool BitEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].equal(b[i])) return false;
  }
  return true;
}

// An optimizer of a user's own (SGD with a decaying trace of the gradients), which the snapshot
// does not know: it serializes its state through the optimizer's own save().
struct TraceSgdOptions : torch::optim::OptimizerCloneableOptions<TraceSgdOptions> {
  explicit TraceSgdOptions(double lr = 0.1) : lr_(lr) {}
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    archive.write("lr", c10::IValue(lr()));
  }
  void serialize(torch::serialize::InputArchive& archive) override {
    c10::IValue value;
    archive.read("lr", value);
    lr(value.toDouble());
  }
  TORCH_ARG(double, lr);  // last: the macro leaves what follows it private
};

struct TraceState : torch::optim::OptimizerCloneableParamState<TraceState> {
  void serialize(torch::serialize::OutputArchive& archive) const override {
    archive.write("trace", trace(), /*is_buffer=*/true);
  }
  void serialize(torch::serialize::InputArchive& archive) override {
    at::Tensor read;
    archive.read("trace", read, /*is_buffer=*/true);
    trace(read);
  }
  TORCH_ARG(at::Tensor, trace);
};

class TraceSgd : public torch::optim::Optimizer {
 public:
  TraceSgd(std::vector<at::Tensor> params, const TraceSgdOptions& options)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<TraceSgdOptions>(options)) {}
  at::Tensor step(LossClosure closure) override {
    at::Tensor loss = closure ? closure() : at::Tensor();
    c10::NoGradGuard no_grad;
    for (torch::optim::OptimizerParamGroup& group : param_groups_) {
      const double lr = static_cast<TraceSgdOptions&>(group.options()).lr();
      for (at::Tensor& parameter : group.params()) {
        if (!parameter.grad().defined()) continue;
        std::unique_ptr<torch::optim::OptimizerParamState>& state =
            state_[parameter.unsafeGetTensorImpl()];
        if (state == nullptr) {
          auto fresh = std::make_unique<TraceState>();
          fresh->trace(at::zeros_like(parameter));
          state = std::move(fresh);
        }
        at::Tensor& trace = static_cast<TraceState&>(*state).trace();
        trace.mul_(0.9).add_(parameter.grad());
        parameter.add_(trace, -lr);
      }
    }
    return loss;
  }
  void save(torch::serialize::OutputArchive& archive) const override {
    torch::optim::serialize<TraceState, TraceSgdOptions>(archive, *this);
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::optim::serialize<TraceState, TraceSgdOptions>(archive, *this);
  }
};

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

struct Case {
  std::string name;
  MakeOptimizer make;
  bool serialized;  // whether the snapshot serializes its state (a type it does not copy)
};

std::vector<Case> Cases() {
  using namespace torch::optim;  // NOLINT(google-build-using-namespace): the optimizers' options
  return {
      {"sgd",
       [](auto p) {
         return std::make_unique<SGD>(p, SGDOptions(0.05).momentum(0.9).nesterov(true));
       },
       false},
      {"adam", [](auto p) { return std::make_unique<Adam>(p, AdamOptions(0.01).amsgrad(true)); },
       false},
      {"adamw",
       [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions(0.01).weight_decay(0.1)); },
       false},
      {"rmsprop",
       [](auto p) {
         return std::make_unique<RMSprop>(p, RMSpropOptions(0.01).centered(true).momentum(0.5));
       },
       false},
      {"adagrad", [](auto p) { return std::make_unique<Adagrad>(p, AdagradOptions(0.05)); }, false},
      {"an optimizer of one's own",
       [](auto p) { return std::make_unique<TraceSgd>(p, TraceSgdOptions(0.05)); }, true},
  };
}

TEST(StateSnapshotTest, RestoredTrainsOnAsTheSerializedCheckpointDoes) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::shared_ptr<LightningModule> module = Mlp();
    std::unique_ptr<torch::optim::Optimizer> optimizer = c.make(module->parameters());
    for (int i = 0; i < 3; ++i) Step(*module, *optimizer);
    TrainingState state;
    state.global_step = 3;
    state.epoch = 1;
    absl::StatusOr<std::string> bytes = SerializeCheckpoint(*module, optimizer.get(), state);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<StateSnapshot> snapshot = StateSnapshot::Take(*module, optimizer.get(), state);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    EXPECT_EQ(snapshot->optimizer_serialized(), c.serialized);

    // Training on changes the live tensors in place; the snapshot keeps its own.
    for (int i = 0; i < 4; ++i) Step(*module, *optimizer);
    const std::vector<at::Tensor> first_run = Weights(*module);

    TrainingState restored;
    ASSERT_TRUE(snapshot->Restore(*module, optimizer.get(), &restored).ok());
    EXPECT_EQ(restored.global_step, 3);
    EXPECT_EQ(restored.epoch, 1);
    for (int i = 0; i < 4; ++i) Step(*module, *optimizer);
    const std::vector<at::Tensor> from_snapshot = Weights(*module);

    // A fresh module and optimizer from the serialized checkpoint.
    std::shared_ptr<LightningModule> other = Mlp();
    std::unique_ptr<torch::optim::Optimizer> other_optimizer = c.make(other->parameters());
    ASSERT_TRUE(RestoreCheckpoint(*bytes, *other, other_optimizer.get(), nullptr).ok());
    for (int i = 0; i < 4; ++i) Step(*other, *other_optimizer);

    EXPECT_TRUE(BitEqual(from_snapshot, Weights(*other)));
    EXPECT_TRUE(BitEqual(from_snapshot, first_run));
    // And into a fresh optimizer (one with no state yet), as a new fit's is.
    std::shared_ptr<LightningModule> third = Mlp();
    std::unique_ptr<torch::optim::Optimizer> third_optimizer = c.make(third->parameters());
    ASSERT_TRUE(snapshot->Restore(*third, third_optimizer.get(), nullptr).ok());
    for (int i = 0; i < 4; ++i) Step(*third, *third_optimizer);
    EXPECT_TRUE(BitEqual(from_snapshot, Weights(*third)));
  }
}

const void* FirstWeightMemory(const StateSnapshot& snapshot) {
  return snapshot.weights().front().second.data_ptr();
}

TEST(StateSnapshotTest, ARecycledSnapshotIsOverwrittenOnlyWhenNothingElseHoldsIt) {
  std::shared_ptr<LightningModule> module = Mlp();
  torch::optim::Adam optimizer(module->parameters(), torch::optim::AdamOptions(0.01));
  Step(*module, optimizer);
  absl::StatusOr<StateSnapshot> first = StateSnapshot::Take(*module, &optimizer, {});
  ASSERT_TRUE(first.ok());
  const std::vector<at::Tensor> at_first = Weights(*module);
  const StateSnapshot kept = *first;  // another holder: its memory must stay as it is

  Step(*module, optimizer);
  absl::StatusOr<StateSnapshot> second =
      StateSnapshot::Take(*module, &optimizer, {}, *std::move(first));
  ASSERT_TRUE(second.ok());
  EXPECT_NE(FirstWeightMemory(*second), FirstWeightMemory(kept));
  const std::vector<at::Tensor> at_second = Weights(*module);
  ASSERT_FALSE(BitEqual(at_first, at_second));
  ASSERT_TRUE(kept.Restore(*module, &optimizer, nullptr).ok());
  EXPECT_TRUE(BitEqual(Weights(*module), at_first));

  // Held by nobody else: the third is written into the second's memory.
  Step(*module, optimizer);
  Step(*module, optimizer);
  const std::vector<at::Tensor> at_third = Weights(*module);
  const void* second_memory = FirstWeightMemory(*second);
  absl::StatusOr<StateSnapshot> third =
      StateSnapshot::Take(*module, &optimizer, {}, *std::move(second));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(FirstWeightMemory(*third), second_memory);
  ASSERT_TRUE(kept.Restore(*module, &optimizer, nullptr).ok());
  ASSERT_TRUE(third->Restore(*module, &optimizer, nullptr).ok());
  EXPECT_TRUE(BitEqual(Weights(*module), at_third));
}

TEST(StateSnapshotTest, AModuleOfAnotherShapeIsRefusedNamingTheTensor) {
  std::shared_ptr<LightningModule> module = Mlp();
  absl::StatusOr<StateSnapshot> snapshot = StateSnapshot::Take(*module, nullptr, {});
  ASSERT_TRUE(snapshot.ok());
  std::shared_ptr<LightningModule> wider = Mlp("mlp:6,32,3");
  absl::Status restored = snapshot->Restore(*wider, nullptr, nullptr);
  EXPECT_EQ(restored.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(restored.message(), HasSubstr("of shape [32, 6] is not the snapshot's"));
}

}  // namespace
}  // namespace ddpspawn
