// Lightning's profilers for fit. "simple" times each of fit's actions on every rank (the training
// step, backward, the optimizer step, the validation step, and the time blocked in collectives); at
// fit's end rank 0 writes every rank's table to <default_root_dir>/profile.txt. "pytorch" records
// LibTorch's profiler (Kineto, CPU activities) through fit and writes a Chrome trace per rank,
// <default_root_dir>/profiler/rank<r>.pt.trace.json, which Perfetto and chrome://tracing open.
#ifndef DDPSPAWN_CORE_TRAIN_LOGGERS_FIT_PROFILER_H_
#define DDPSPAWN_CORE_TRAIN_LOGGERS_FIT_PROFILER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ddpspawn {

class DDPSpawnStrategy;

enum class ProfilerKind { kNone, kSimple, kPyTorch };
// "none", "simple", "pytorch".
absl::string_view ProfilerKindName(ProfilerKind kind);
absl::StatusOr<ProfilerKind> ParseProfilerKind(absl::string_view name);

// Not thread-safe: one per fit, on its thread. Owns LibTorch's profiler session while it records
// (one per process: a second is refused).
class FitProfiler {
 public:
  explicit FitProfiler(ProfilerKind kind) : kind_(kind) {}
  ~FitProfiler();
  FitProfiler(const FitProfiler&) = delete;
  FitProfiler& operator=(const FitProfiler&) = delete;

  // Starts recording (pytorch: LibTorch's profiler on this thread).
  absl::Status Start();

  // Times `action` while it lives (simple); nothing otherwise.
  class Timed {
   public:
    Timed(FitProfiler* profiler, absl::string_view action)
        : profiler_(profiler->kind_ == ProfilerKind::kSimple ? profiler : nullptr),
          action_(action),
          start_(profiler_ != nullptr ? absl::Now() : absl::InfinitePast()) {}
    ~Timed() {
      if (profiler_ != nullptr) profiler_->Add(action_, absl::Now() - start_);
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    FitProfiler* profiler_;
    absl::string_view action_;
    absl::Time start_;
  };
  Timed Time(absl::string_view action) { return Timed(this, action); }

  // At fit's end, on every rank (simple: one all-gather of the tables): writes the files of the
  // file comment under `dir`, and with `print` rank 0 prints its own table. `blocked_seconds`: this
  // rank's time blocked in collectives during fit.
  absl::Status Finish(DDPSpawnStrategy& strategy, const std::string& dir, double blocked_seconds,
                      bool print);

 private:
  struct Totals {
    int64_t calls = 0;
    absl::Duration total;
  };
  void Add(absl::string_view action, absl::Duration took);
  std::string Table(double blocked_seconds) const;

  const ProfilerKind kind_;
  std::map<std::string, Totals, std::less<>> actions_;
  absl::Time started_;
  bool recording_ = false;  // pytorch: LibTorch's profiler is on
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_LOGGERS_FIT_PROFILER_H_
