// `ddpspawn export`: a checkpoint's weights as a file other tools read (a state dict for
// torch.load, or safetensors; core/model/weights_io.h).
#ifndef DDPSPAWN_CORE_TRAIN_RUN_EXPORT_H_
#define DDPSPAWN_CORE_TRAIN_RUN_EXPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/train/run/run_options.h"

namespace ddpspawn {

// Options: checkpoint (a ddpspawn checkpoint, or an exported file to convert), format (torch or
// safetensors) and output (written atomically, never through a link). Returns the result's
// key=value lines: output, format, tensors.
absl::StatusOr<std::string> RunExport(const RunOptions& options);

// The help text of `ddpspawn export`.
std::string ExportHelp();

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_EXPORT_H_
