// Exporting a checkpoint's weights (see export.h).
#include "core/train/run/export.h"

#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/weights_io.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

std::string ExportHelp() {
  return "usage: ddpspawn export --checkpoint FILE --format torch|safetensors --output FILE\n"
         "\n"
         "Writes the checkpoint's weights (parameters and buffers by name) as a state dict\n"
         "that torch.load reads (then module.load_state_dict(weights, strict=True)), or as\n"
         "safetensors. validate, test and predict take either back with --checkpoint.\n";
}

absl::StatusOr<std::string> RunExport(const RunOptions& options) {
  std::string checkpoint, output;
  std::optional<WeightsFormat> format;
  for (const auto& [key, value] : options) {
    if (key == "checkpoint") {
      checkpoint = value;
    } else if (key == "output") {
      output = value;
    } else if (key == "format") {
      ASSIGN_OR_RETURN(format, ParseWeightsFormat(value));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown export option '", key, "'; expected checkpoint, format, output"));
    }
  }
  if (checkpoint.empty() || output.empty() || !format.has_value()) {
    return absl::InvalidArgumentError("export needs --checkpoint, --format and --output");
  }
  absl::StatusOr<NamedTensors> weights = ReadWeightsAt(checkpoint);
  if (!weights.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", checkpoint, ": ", weights.status().message()));
  }
  ASSIGN_OR_RETURN(std::string encoded, EncodeWeights(*weights, *format));
  RETURN_IF_ERROR(WriteFileAtomically(output, encoded, /*durable=*/true, 0644));
  return absl::StrFormat("output=%s\nformat=%s\ntensors=%d\n",
                         std::filesystem::absolute(output).string(), WeightsFormatName(*format),
                         weights->size());
}

}  // namespace ddpspawn
