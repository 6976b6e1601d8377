// Checkpoints of named tensors in the Trainer's format, for loops whose model is not a
// torch::nn::Module: the C ABI's front ends (a Rust VarStore, a Java program's buffers). What these
// write, `ddpspawn export`, the CLI's validate, test and predict --checkpoint, Fabric::Load and
// ReadCheckpointWeights read (not fit's --resume-from: it holds no optimizer state); what
// Fabric::Save or the Trainer writes, LoadTensorCheckpoint reads.
#ifndef DDPSPAWN_CORE_FABRIC_TENSOR_CHECKPOINT_H_
#define DDPSPAWN_CORE_FABRIC_TENSOR_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/module.h"

namespace ddpspawn {

class ProcessGroup;

// Every rank of `group` calls it: rank 0 writes the tensors `rank_zero_tensors` returns (by name,
// as the model's state; it is called on rank 0 only) and `step` to `path` (atomically: whole or not
// at all), and every rank returns rank 0's outcome, its error text included. No tensor, or a name
// that is empty or repeated, is InvalidArgument on rank 0, before anything is written.
absl::Status SaveTensorCheckpoint(
    ProcessGroup& group, const std::string& path, int64_t step,
    const std::function<absl::StatusOr<NamedTensors>()>& rank_zero_tensors);

// Reads the checkpoint at `path` into `tensors` in place, each by its name (on this rank alone: no
// collective). A name the checkpoint lacks, another shape or another element type is
// InvalidArgument naming the tensor, and then nothing has been written. Returns the checkpoint's
// step.
absl::StatusOr<int64_t> LoadTensorCheckpoint(const std::string& path, const NamedTensors& tensors);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_FABRIC_TENSOR_CHECKPOINT_H_
