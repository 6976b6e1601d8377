// The Trainer's in-memory commits (in_memory_commit.h): taking one, and resuming from one.
#include "core/train/loop/in_memory_commit.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/model/checkpoint.h"
#include "core/strategy/checkpoint_io.h"
#include "core/train/loop/fit_run.h"
#include "core/train/loop/optimizer_factory.h"
#include "core/train/loop/trainer.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::Status Trainer::CommitInMemory(FitRun& run) {
  InMemoryCommit& commit = *options_.in_memory_commit;
  TrainingState state = run.ToSave();
  RETURN_IF_ERROR(CompleteCheckpointState(state));
  const int64_t step = state.global_step;
  // Into the last commit's memory: one copy of the state is held, and no allocation is made.
  std::optional<StateSnapshot> last = std::exchange(commit.snapshot, std::nullopt);
  ASSIGN_OR_RETURN(commit.snapshot, StateSnapshot::Take(*run.module, run.optimizer.get(),
                                                        std::move(state), std::move(last)));
  commit.step = step;
  return absl::OkStatus();
}

absl::Status Trainer::RestoreCommit(LightningModule& module, FitRun& run) {
  InMemoryCommit& commit = *options_.in_memory_commit;
  commit.resume = false;
  const std::string source = absl::StrCat("the in-memory commit of step ", commit.step);
  // A rank lacks new rank 0's commit when it is a replacement (it has none), or when a loss cut its
  // last commit short on some ranks and not on others.
  const bool holds =
      commit.snapshot.has_value() && commit.snapshot->training_state().global_step == commit.step;
  ASSIGN_OR_RETURN(at::Tensor least,
                   strategy_.Reduce(at::tensor(holds ? 1.0F : 0.0F), ReduceOp::kMin));
  absl::Status restored;
  if (least.item<float>() > 0.5F) {
    restored = commit.snapshot->Restore(module, run.optimizer.get(), &run.state);
  } else {
    // Rank 0 (which holds it: its step is the one resumed) sends it to every rank, serialized.
    std::string bytes;
    const bool sender = strategy_.global_rank() == 0;
    if (sender) {
      absl::StatusOr<std::string> serialized = [&]() -> absl::StatusOr<std::string> {
        if (!holds) return absl::InternalError("rank 0 lacks it");
        RETURN_IF_ERROR(commit.snapshot->Restore(module, run.optimizer.get(), &run.state));
        return SerializeCheckpoint(module, run.optimizer.get(), run.state);
      }();
      restored = serialized.status();
      // Sent empty on an error: the others fail with it rather than wait.
      if (serialized.ok()) bytes = *std::move(serialized);
    }
    ASSIGN_OR_RETURN(bytes, strategy_.Broadcast(bytes, 0));
    if (!sender) {
      restored = bytes.empty() ? absl::InternalError("rank 0 could not send it")
                               : RestoreCheckpoint(bytes, module, run.optimizer.get(), &run.state);
      // From here on it holds rank 0's commit, as every rank does (should it be rank 0 at the next
      // change, before the next commit, it sends this one).
      if (restored.ok()) {
        absl::StatusOr<StateSnapshot> taken = StateSnapshot::Take(
            module, run.optimizer.get(), run.state, std::exchange(commit.snapshot, std::nullopt));
        restored = taken.status();
        if (taken.ok()) commit.snapshot = *std::move(taken);
      }
    }
  }
  if (!restored.ok()) {
    return absl::Status(restored.code(),
                        absl::StrCat("cannot resume from ", source, ": ", restored.message()));
  }
  return absl::OkStatus();
}

std::string SaveLastCommit(const InMemoryCommit& commit, LightningModule& module,
                           const std::string& path, int rank) {
  if (!commit.snapshot.has_value()) {
    return absl::StrCat("rank ", rank, " had no commit (its fit never started): no checkpoint ",
                        "was written");
  }
  const int64_t step = commit.snapshot->training_state().global_step;
  absl::Status saved = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<torch::optim::Optimizer> optimizer,
                     MakeOptimizer(module.ConfigureOptimizers(), module.parameters()));
    TrainingState state;
    RETURN_IF_ERROR(commit.snapshot->Restore(module, optimizer.get(), &state));
    ASSIGN_OR_RETURN(std::string bytes, SerializeCheckpoint(module, optimizer.get(), state));
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
    return MakeAtomicFileCheckpointIO()->Save(bytes, path);
  }();
  if (!saved.ok()) {
    return absl::StrCat("rank ", rank, " could not write the last commit (step ", step, ") to ",
                        path, ": ", saved.message());
  }
  return absl::StrCat("rank ", rank, " wrote the last commit (step ", step, ") to ", path,
                      ": --resume-from ", path, " continues the fit");
}

}  // namespace ddpspawn
