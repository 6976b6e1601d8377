// A model's weights (parameters and buffers by name) in the formats other tools read: a state dict
// as torch.save writes it (torch.load in Python gives {name: tensor}, which
// load_state_dict(strict=True) takes), and safetensors. Exports a ddpspawn checkpoint's weights to
// either, and loads weights from either or from a ddpspawn checkpoint into a module, strictly:
// every tensor the module has, with its shape, and no other.
#ifndef DDPSPAWN_CORE_MODEL_WEIGHTS_IO_H_
#define DDPSPAWN_CORE_MODEL_WEIGHTS_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/module.h"

namespace ddpspawn {

enum class WeightsFormat { kTorch, kSafetensors };
absl::string_view WeightsFormatName(WeightsFormat format);
absl::StatusOr<WeightsFormat> ParseWeightsFormat(absl::string_view name);

// The file's bytes: CPU tensors, contiguous, in `weights`' order.
absl::StatusOr<std::string> EncodeWeights(const NamedTensors& weights, WeightsFormat format);

// Weights from a file in either format (told apart by its content): a torch.save'd {name: tensor}
// (or {"state_dict": {name: tensor}}, as Lightning's checkpoints hold it), or safetensors. Damaged
// or unsupported content (an offset outside the file, an unknown dtype, a value that is not a
// tensor) is an error that says what.
absl::StatusOr<NamedTensors> DecodeWeights(const std::string& bytes);

// What a tensor read from a file must be to count as a weight: dense, of one of safetensors' dtypes
// (float64/32/16, bfloat16, int64/32/16/8, uint8, bool), which every operation ddpspawn applies to
// weights supports. A file may hold any tensor LibTorch has (complex, quantized, sparse, 1- to
// 7-bit integers); such a one is an error naming `name` and what it is.
absl::Status CheckWeightTensor(const std::string& name, const at::Tensor& tensor);

// Copies `weights` into the module's tensors by name; a name missing on either side, or another
// shape, is an error naming it, and then nothing is changed.
absl::Status LoadWeights(const NamedTensors& weights, LightningModule& module);

// The weights of a ddpspawn checkpoint (ReadCheckpointWeights) or of an exported or foreign file
// (DecodeWeights).
absl::StatusOr<NamedTensors> ReadWeightsFromAnyFormat(const std::string& bytes);

// A ddpspawn checkpoint's weights into the module (RestoreCheckpoint), or those of an exported or
// foreign file (DecodeWeights, LoadWeights).
absl::Status LoadWeightsFromAnyFormat(const std::string& bytes, LightningModule& module);

// The weights at `path`: a sharded checkpoint's directory (ReadShardedCheckpointWeights: the whole
// model in this process), else the file's (ReadWeightsFromAnyFormat). LoadWeightsAt loads them into
// the module (a file through LoadWeightsFromAnyFormat).
absl::StatusOr<NamedTensors> ReadWeightsAt(const std::string& path);
absl::Status LoadWeightsAt(const std::string& path, LightningModule& module);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_WEIGHTS_IO_H_
