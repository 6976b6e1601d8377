// FitResult, what fit hands back to the launcher, and its text form (key=value lines), in which
// rank 0's result travels to the launcher.
#ifndef DDPSPAWN_CORE_TRAIN_LOOP_FIT_RESULT_H_
#define DDPSPAWN_CORE_TRAIN_LOOP_FIT_RESULT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/comm/arrival_report.h"

namespace ddpspawn {

// What fit hands back to the launcher (through rank 0's result). Plain values; thread-compatible.
struct FitResult {
  std::string checkpoint;  // the final checkpoint: weights, optimizer, position, RNG
  std::string metrics_csv;
  int64_t epoch = 0;
  int64_t global_step = 0;
  std::map<std::string, double> metrics;  // the last value of every logged metric
  // "max_time", the signal's name ("SIGUSR1") or what a callback said ("early_stopping") when that
  // ended fit early; else empty.
  std::string stopped_by;
  // Each rank's optimizer state at fit's end, in bytes, by rank (-1 for an optimizer whose state
  // OptimizerStateBytes cannot measure).
  std::vector<int64_t> optimizer_state_bytes;
  // Each rank's most tensor memory during fit, in bytes, by rank: CPU tensors (parameters,
  // gradients and their buckets, optimizer state, activations, data), where the rank counts them
  // (tensor_memory.h: the ranks of ddpspawn's own runs); empty elsewhere.
  std::vector<int64_t> peak_tensor_bytes;
  // The parameter bytes each rank keeps between training steps, by rank: every parameter's, or
  // under full_shard its rows of them.
  std::vector<int64_t> parameter_bytes;
  // full_shard: how many units (FSDP's wrapped modules) the parameters are gathered by; 0
  // otherwise.
  int64_t full_shard_units = 0;
  // Who arrived last at the collectives during fit, and by how much.
  ArrivalReport straggler;
  // One "key=value" line per field (stopped_by only when set; a metric as metric.<name>;
  // optimizer_state_bytes, peak_tensor_bytes and parameter_bytes comma-separated; the straggler
  // report as ArrivalReport::ToPairs()); Decode skips keys it does not know, the straggler report's
  // included.
  std::string Encode() const;
  static absl::StatusOr<FitResult> Decode(const std::string& text);
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOOP_FIT_RESULT_H_
