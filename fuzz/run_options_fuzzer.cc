// libFuzzer target: the run options parser behind the CLI and ddpspawn_run. The input is a command
// on its first line and key=value entries on the others (split at the first '=', as ddpspawn_run
// splits them). Whatever it is, ParseRunOptions and ResolveRunConfig return a config or an error; a
// crash, an abort, a sanitizer report or a leak is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/train/run/run_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ddpspawn::RunOptions options;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    options.emplace_back(lines[i].substr(0, eq),
                         eq == std::string::npos ? "" : lines[i].substr(eq + 1));
  }
  // Parsed, then resolved against a plain environment (none is read: the fuzzer's verdicts must not
  // depend on where it runs).
  absl::StatusOr<ddpspawn::RunConfig> config = ddpspawn::ParseRunOptions(lines[0], options);
  if (config.ok()) {
    if (absl::Status resolved = ddpspawn::ResolveRunConfig(*config, ddpspawn::RunEnvironment{});
        !resolved.ok()) {
      config = resolved;
    }
  }
  // What a parsed config promises the launcher.
  if (config.ok() && (config->world_size < 1 || config->nproc_per_node < 1 ||
                      config->node_rank < 0 || config->node_rank >= config->nnodes ||
                      config->trainer.batch_size < 1 || !(config->optimizer.lr > 0))) {
    __builtin_trap();
  }
  return 0;
}
