// Lightning's ModelCheckpoint: beside last.ckpt (which fit always writes, and restarts resume
// from), keeps the k best checkpoints by a monitored metric, or every one, under names made from a
// template with the epoch, the step and metric values
// ("epoch=4-step=115-val_accuracy=0.9722.ckpt"). Rank 0 writes each atomically and removes one only
// after its better replacement is written, so at most k + 1 files exist at any moment and never
// fewer than were kept before.
#ifndef DDPSPAWN_CORE_TRAIN_CALLBACKS_MODEL_CHECKPOINT_H_
#define DDPSPAWN_CORE_TRAIN_CALLBACKS_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/train/callbacks/callback.h"

namespace ddpspawn {

struct ModelCheckpointOptions {
  std::string monitor;  // empty: by recency, the latest save_top_k (1 or -1)
  MonitorMode mode = MonitorMode::kAuto;
  int save_top_k = 1;  // -1: keep every one; 0: none
  int every_n_epochs = 1;
  // > 0: check every this many optimizer steps instead of at epoch ends.
  int64_t every_n_train_steps = 0;
  // {epoch}, {step} and {METRIC} or {METRIC:.4f} (a printf-style precision and f, e or g); each
  // becomes name=value. Empty: "{epoch}-{step}", with "-{MONITOR:.4f}" when monitoring.
  std::string filename;
};

// Whether these options ask for checkpoints beyond last.ckpt: a monitor, a filename or save_top_k
// -1 (save_top_k 1 by recency is last.ckpt itself).
bool ModelCheckpointEnabled(const ModelCheckpointOptions& options);
// What the options allow, before any rank starts.
absl::Status CheckModelCheckpointOptions(const ModelCheckpointOptions& options);

// The file name (without ".ckpt") that `filename` makes for epoch `epoch` (from 0), step `step` and
// `metrics`; an error names a metric it lacks.
absl::StatusOr<std::string> FormatCheckpointName(const std::string& filename, int64_t epoch,
                                                 int64_t step,
                                                 const std::map<std::string, double>& metrics);

// Thread-compatible; one fit at a time.
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options);

  std::string name() const override { return "ModelCheckpoint"; }
  bool RunsInFastDevRun() const override { return false; }
  absl::Status OnTrainEpochEnd(CallbackContext& context) override;
  absl::Status OnTrainBatchEnd(CallbackContext& context, int64_t batch, bool stepped) override;
  absl::Status OnValidationEnd(CallbackContext& context) override;
  std::string OnSaveCheckpoint() const override;
  absl::Status OnLoadCheckpoint(absl::string_view state) override;

  // The best kept checkpoint and its score (the latest, by recency); empty before the first.
  std::string best_model_path() const;
  double best_model_score() const;
  // Every kept checkpoint with its score, best first.
  std::vector<std::pair<double, std::string>> kept() const;

 private:
  absl::Status Check(CallbackContext& context, const std::map<std::string, double>& metrics);
  bool Better(double a, double b) const;

  ModelCheckpointOptions options_;
  MonitorMode mode_;  // resolved (kMax by recency: the later step scores higher)
  std::vector<std::pair<double, std::string>> kept_;  // in the order saved
  // Step checks skip a monitored metric not logged yet (as Lightning) until the loop that logs it
  // has run once in this fit: validation, or the epoch's end when fit does not validate.
  bool validation_ran_ = false;
  bool epoch_ended_ = false;
  bool said_skipping_ = false;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_CALLBACKS_MODEL_CHECKPOINT_H_
