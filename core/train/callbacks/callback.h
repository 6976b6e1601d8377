// Lightning's callbacks: hooks that Trainer::Fit calls on every rank, in the order the callbacks
// were given, at fixed points of training; a callback reads where training stands and the logged
// metrics, and may log, save a checkpoint, or ask fit to stop. Their state travels in every
// checkpoint fit writes and comes back on resume. EarlyStopping, ModelCheckpoint and
// LearningRateMonitor are built on it (early_stopping.h, model_checkpoint.h, lr_monitor.h).
#ifndef DDPSPAWN_CORE_TRAIN_CALLBACKS_CALLBACK_H_
#define DDPSPAWN_CORE_TRAIN_CALLBACKS_CALLBACK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// What a hook sees of the fit in progress. Valid during the hook only; used by the rank's training
// thread only. The methods marked collective must be called by every rank at the same point, as
// every hook is.
class CallbackContext {
 public:
  virtual ~CallbackContext() = default;

  virtual int global_rank() const = 0;
  virtual int world_size() const = 0;
  bool is_global_zero() const { return global_rank() == 0; }
  // The epoch in progress (or just ended), from 0, and the optimizer steps so far.
  virtual int64_t epoch() const = 0;
  virtual int64_t global_step() const = 0;
  // The latest value of every metric logged so far, and of those logged in this epoch. Every rank
  // holds the same ones: fit's loss and evaluation metrics are reduced across the ranks, a module's
  // Log() values too (the mean with sync_dist, else rank 0's), and Log() below is a callback's own.
  virtual const std::map<std::string, double>& metrics() const = 0;
  virtual const std::map<std::string, double>& epoch_metrics() const = 0;
  // Whether fit validates at all (it was given validation data and check_val_every_n_epoch > 0),
  // and whether it did in this epoch.
  virtual bool validates() const = 0;
  virtual bool validated_this_epoch() const = 0;
  // The first parameter group's learning rate and the optimizer's class name ("SGD", "Adam",
  // "AdamW").
  virtual double learning_rate() const = 0;
  virtual std::string optimizer_name() const = 0;
  // The learning rate the optimizer was configured with, and the optimizer steps fit will take in
  // all (max_steps, or max_epochs' worth).
  virtual double base_learning_rate() const = 0;
  virtual int64_t total_steps() const = 0;
  // max_epochs (0 when fit is bounded by max_steps only).
  virtual int64_t total_epochs() const = 0;
  // Sets every parameter group's learning rate (from the next optimizer step).
  virtual void set_learning_rate(double lr) = 0;
  // Where fit writes: <default_root_dir>/checkpoints.
  virtual std::string checkpoint_dir() const = 0;

  // Records a metric as it is, not reduced (rank 0 writes it to metrics.csv): a callback logs what
  // every rank computes alike (e.g. the learning rate), or the ranks' metrics() differ from then
  // on.
  virtual absl::Status Log(const std::string& name, double value) = 0;
  // Collective: rank 0 writes a checkpoint of the current state (weights, optimizer, position,
  // every callback's state) to `path`, atomically.
  virtual absl::Status SaveCheckpoint(const std::string& path) = 0;
  // Rank 0 removes a checkpoint file; the other ranks do nothing.
  virtual absl::Status RemoveCheckpoint(const std::string& path) = 0;
  // Collective: true on every rank when `mine` is true on any rank.
  virtual absl::StatusOr<bool> AnyRank(bool mine) = 0;
  // Asks fit to stop once the current hook returns. `by` is FitResult's stopped_by
  // ("early_stopping"); `why` ends rank 0's epoch line.
  virtual void RequestStop(const std::string& by, const std::string& why) = 0;
};

// A callback. Hooks run on every rank; an error from one fails fit on that rank (and, through the
// next collective, on every rank). Instances are used by one fit at a time. Thread-compatible: fit
// calls the hooks on the rank's training thread; the trainer shares them
// (TrainerOptions::callbacks) with its caller.
class Callback {
 public:
  virtual ~Callback() = default;

  // Names the callback's state in checkpoints: unique among a fit's callbacks.
  virtual std::string name() const = 0;
  // false for a callback that writes or stops (checkpoints, early stopping, logging the rate),
  // which fast_dev_run leaves out, as Lightning does.
  virtual bool RunsInFastDevRun() const { return true; }

  virtual absl::Status OnFitStart(CallbackContext& /*context*/) { return absl::OkStatus(); }
  virtual absl::Status OnFitEnd(CallbackContext& /*context*/) { return absl::OkStatus(); }
  virtual absl::Status OnTrainEpochStart(CallbackContext& /*context*/) { return absl::OkStatus(); }
  // After the epoch's training loss is logged and its validation (if due) ran, before last.ckpt is
  // written.
  virtual absl::Status OnTrainEpochEnd(CallbackContext& /*context*/) { return absl::OkStatus(); }
  // Before each batch's forward pass.
  virtual absl::Status OnTrainBatchStart(CallbackContext& /*context*/, int64_t /*batch*/) {
    return absl::OkStatus();
  }
  // After each batch's backward pass and, when one was due, its optimizer step (`stepped`).
  virtual absl::Status OnTrainBatchEnd(CallbackContext& /*context*/, int64_t /*batch*/,
                                       bool /*stepped*/) {
    return absl::OkStatus();
  }
  virtual absl::Status OnValidationStart(CallbackContext& /*context*/) { return absl::OkStatus(); }
  // The validation metrics are in context.epoch_metrics().
  virtual absl::Status OnValidationEnd(CallbackContext& /*context*/) { return absl::OkStatus(); }
  // What the callback keeps in a checkpoint about to be written (empty: nothing), and, on resume,
  // what a checkpoint kept.
  virtual std::string OnSaveCheckpoint() const { return ""; }
  virtual absl::Status OnLoadCheckpoint(absl::string_view /*state*/) { return absl::OkStatus(); }
  // Fit failed on this rank with `error` (after this, fit returns it).
  virtual void OnException(const absl::Status& /*error*/) {}
};

// "min" or "max": which way a monitored metric improves. kAuto resolves by the metric's name
// (ResolveMonitorMode).
enum class MonitorMode { kAuto, kMin, kMax };
absl::string_view MonitorModeName(MonitorMode mode);
absl::StatusOr<MonitorMode> ParseMonitorMode(absl::string_view name);
// kAuto: max for ddpspawn's accuracies (*accuracy), min for its losses (*loss, *loss_epoch); any
// other metric is an error that names the metric's option (`monitor_option`) and asks for min or
// max in `mode_option`.
absl::StatusOr<MonitorMode> ResolveMonitorMode(MonitorMode mode, const std::string& metric,
                                               absl::string_view monitor_option,
                                               absl::string_view mode_option);

// The value `metric` was logged with in this epoch; none when it was not due (a validation metric
// between validations); an error (UnknownMetricError, "<subject> '<metric>' ...") when fit will not
// log it.
absl::StatusOr<std::optional<double>> ValueThisEpoch(const CallbackContext& context,
                                                     absl::string_view subject,
                                                     const std::string& metric);

// A callback's checkpoint state made of numbers: "name=value name=value ..." (doubles, exact for
// integers below 2^53). Decoding wants the same names in the same order; anything else is an error
// naming `callback`.
std::string EncodeStateNumbers(const std::vector<std::pair<std::string, double>>& numbers);
absl::StatusOr<std::vector<double>> DecodeStateNumbers(absl::string_view state,
                                                       const std::vector<std::string>& names,
                                                       absl::string_view callback);

// The error for a metric that fit does not log, naming what it logs: "<subject> '<metric>', which
// fit does not log (it logs ...)".
absl::Status UnknownMetricError(absl::string_view subject, const std::string& metric,
                                const std::map<std::string, double>& logged);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_CALLBACKS_CALLBACK_H_
