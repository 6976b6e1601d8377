// libFuzzer target: reading weights and checkpoints, as `--checkpoint`, `--resume-from` and
// `ddpspawn export` do: a ddpspawn checkpoint (its envelope's size and checksum first),
// safetensors, or a torch.save'd state dict. Every tensor returned is read whole.
#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/model/checkpoint_envelope.h"
#include "core/model/weights_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)ddpspawn::UnsealCheckpoint(bytes);
  absl::StatusOr<ddpspawn::NamedTensors> weights = ddpspawn::ReadWeightsFromAnyFormat(bytes);
  if (weights.ok()) {
    for (const auto& [name, tensor] : *weights) {
      if (name.empty() || !tensor.defined()) __builtin_trap();
      (void)tensor.sum();
    }
  }
  return 0;
}
