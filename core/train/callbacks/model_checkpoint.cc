// Top-k checkpoints (see model_checkpoint.h).
#include "core/train/callbacks/model_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// One piece of a filename template: literal text, or a field with an optional printf precision and
// conversion (f, e or g).
struct TemplatePiece {
  std::string literal;
  std::string field;
  int precision = -1;
  char conversion = 'g';
};

// Letters, digits and _ - . = +: a file name in the checkpoint directory.
bool AllowedInName(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '=' || c == '+';
}

absl::Status BadTemplate(const std::string& filename, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint_filename '", filename, "': ", why));
}

absl::StatusOr<std::vector<TemplatePiece>> ParseTemplate(const std::string& filename) {
  std::vector<TemplatePiece> pieces;
  size_t i = 0;
  while (i < filename.size()) {
    const char c = filename[i];
    if (c == '{') {
      const size_t close = filename.find('}', i);
      if (close == std::string::npos) return BadTemplate(filename, "a '{' is never closed");
      const std::string inside = filename.substr(i + 1, close - i - 1);
      const std::vector<std::string> parts = absl::StrSplit(inside, absl::MaxSplits(':', 1));
      TemplatePiece piece;
      piece.field = parts[0];
      if (piece.field.empty()) return BadTemplate(filename, "'{}' names no field");
      if (parts.size() == 2) {
        const std::string& spec = parts[1];
        if (spec.size() < 3 || spec[0] != '.' ||
            !absl::SimpleAtoi(spec.substr(1, spec.size() - 2), &piece.precision) ||
            piece.precision < 0 || piece.precision > 17 ||
            (spec.back() != 'f' && spec.back() != 'e' && spec.back() != 'g')) {
          return BadTemplate(filename,
                             absl::StrCat("'", spec, "' is not a format such as .4f, .3e or .6g"));
        }
        piece.conversion = spec.back();
      }
      pieces.push_back(std::move(piece));
      i = close + 1;
      continue;
    }
    if (!AllowedInName(c)) {
      return BadTemplate(filename,
                         absl::StrCat("'", std::string(1, c),
                                      "' is not allowed (letters, digits, _ - . = + and fields)"));
    }
    if (pieces.empty() || !pieces.back().field.empty()) pieces.emplace_back();
    pieces.back().literal.push_back(c);
    ++i;
  }
  if (pieces.empty()) return BadTemplate(filename, "it is empty");
  return pieces;
}

std::string DefaultFilename(const ModelCheckpointOptions& options) {
  return options.monitor.empty() ? "{epoch}-{step}"
                                 : absl::StrCat("{epoch}-{step}-{", options.monitor, ":.4f}");
}

bool FileExists(const std::string& path) {
  struct stat info = {};
  return lstat(path.c_str(), &info) == 0;
}

}  // namespace

bool ModelCheckpointEnabled(const ModelCheckpointOptions& options) {
  return options.save_top_k != 0 &&
         (!options.monitor.empty() || !options.filename.empty() || options.save_top_k == -1);
}

absl::Status CheckModelCheckpointOptions(const ModelCheckpointOptions& options) {
  if (options.save_top_k < -1) return absl::InvalidArgumentError("save_top_k must be >= -1");
  if (options.monitor.empty() && options.save_top_k > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "save_top_k ", options.save_top_k,
        " needs --monitor to rank checkpoints by (without it: 1, the latest, or -1, all)"));
  }
  if (options.every_n_epochs < 0 || options.every_n_train_steps < 0) {
    return absl::InvalidArgumentError("every_n_epochs and every_n_train_steps must be >= 0");
  }
  if (ModelCheckpointEnabled(options) && options.every_n_epochs == 0 &&
      options.every_n_train_steps == 0) {
    return absl::InvalidArgumentError(
        "ModelCheckpoint would never check: set every_n_epochs or every_n_train_steps");
  }
  if (!options.filename.empty()) RETURN_IF_ERROR(ParseTemplate(options.filename).status());
  if (options.filename == "last") {
    return BadTemplate(options.filename, "it names last.ckpt, which fit writes itself");
  }
  if (!options.monitor.empty()) {
    RETURN_IF_ERROR(ResolveMonitorMode(options.mode, options.monitor, "monitor", "mode").status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FormatCheckpointName(const std::string& filename, int64_t epoch,
                                                 int64_t step,
                                                 const std::map<std::string, double>& metrics) {
  ASSIGN_OR_RETURN(std::vector<TemplatePiece> pieces, ParseTemplate(filename));
  std::string name;
  for (const TemplatePiece& piece : pieces) {
    absl::StrAppend(&name, piece.literal);
    if (piece.field.empty()) continue;
    absl::StrAppend(&name, piece.field, "=");
    if (piece.field == "epoch" || piece.field == "step") {
      absl::StrAppend(&name, piece.field == "epoch" ? epoch : step);
      continue;
    }
    const auto found = metrics.find(piece.field);
    if (found == metrics.end()) {
      return UnknownMetricError(absl::StrCat("checkpoint_filename '", filename, "' names"),
                                piece.field, metrics);
    }
    const int precision = piece.precision >= 0 ? piece.precision : 6;
    switch (piece.conversion) {
      case 'f':
        absl::StrAppendFormat(&name, "%.*f", precision, found->second);
        break;
      case 'e':
        absl::StrAppendFormat(&name, "%.*e", precision, found->second);
        break;
      default:
        absl::StrAppendFormat(&name, "%.*g", precision, found->second);
    }
  }
  if (name == "last") return BadTemplate(filename, "it names last.ckpt, which fit writes itself");
  return name;
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : options_(std::move(options)),
      mode_(
          options_.monitor.empty()
              ? MonitorMode::kMax
              : ResolveMonitorMode(options_.mode, options_.monitor, "", "")
                    .value_or(MonitorMode::kMin)) {  // CheckModelCheckpointOptions refused the rest
  if (options_.filename.empty()) options_.filename = DefaultFilename(options_);
}

absl::Status ModelCheckpoint::OnTrainEpochEnd(CallbackContext& context) {
  epoch_ended_ = true;
  if (options_.every_n_train_steps > 0 || options_.every_n_epochs == 0 ||
      (context.epoch() + 1) % options_.every_n_epochs != 0) {
    return absl::OkStatus();
  }
  if (!options_.monitor.empty()) {
    ASSIGN_OR_RETURN(const std::optional<double> value,
                     ValueThisEpoch(context, "ModelCheckpoint monitors", options_.monitor));
    if (!value.has_value()) return absl::OkStatus();
  }
  return Check(context, context.metrics());
}

absl::Status ModelCheckpoint::OnTrainBatchEnd(CallbackContext& context, int64_t /*batch*/,
                                              bool stepped) {
  if (!stepped || options_.every_n_train_steps <= 0 ||
      context.global_step() % options_.every_n_train_steps != 0) {
    return absl::OkStatus();
  }
  if (!options_.monitor.empty() && context.metrics().count(options_.monitor) == 0) {
    const bool logger_ran = context.validates() ? validation_ran_ : epoch_ended_;
    if (logger_ran) {
      return UnknownMetricError("ModelCheckpoint monitors", options_.monitor, context.metrics());
    }
    if (!said_skipping_ && context.is_global_zero()) {
      std::fprintf(stderr,
                   "ddpspawn: ModelCheckpoint: '%s' is not logged yet at step %lld; step "
                   "checkpoints start once %s logs it\n",
                   options_.monitor.c_str(), static_cast<long long>(context.global_step()),
                   context.validates() ? "validation" : "the epoch's end");
    }
    said_skipping_ = true;
    return absl::OkStatus();
  }
  return Check(context, context.metrics());
}

absl::Status ModelCheckpoint::OnValidationEnd(CallbackContext& /*context*/) {
  validation_ran_ = true;
  return absl::OkStatus();
}

bool ModelCheckpoint::Better(double a, double b) const {
  return mode_ == MonitorMode::kMax ? a > b : a < b;
}

// Saves when the current state ranks among the best save_top_k, then drops the one it displaced.
// `metrics` are the same on every rank, and so every decision here.
absl::Status ModelCheckpoint::Check(CallbackContext& context,
                                    const std::map<std::string, double>& metrics) {
  const double score = options_.monitor.empty() ? static_cast<double>(context.global_step())
                                                : metrics.at(options_.monitor);
  if (!std::isfinite(score)) return absl::OkStatus();  // never among the best
  const auto worst =
      std::min_element(kept_.begin(), kept_.end(),
                       [this](const auto& a, const auto& b) { return Better(b.first, a.first); });
  const bool full =
      options_.save_top_k >= 0 && static_cast<int64_t>(kept_.size()) >= options_.save_top_k;
  if (full && !Better(score, worst->first)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string base, FormatCheckpointName(options_.filename, context.epoch(),
                                                          context.global_step(), metrics));
  // A name already taken (by this run or an earlier one) gets -v1, -v2, ...; rank 0's disk decides,
  // for every rank.
  std::string path;
  for (int version = 0;; ++version) {
    path = absl::StrCat(context.checkpoint_dir(), "/", base,
                        version == 0 ? "" : absl::StrCat("-v", version), ".ckpt");
    ASSIGN_OR_RETURN(bool taken, context.AnyRank(context.is_global_zero() && FileExists(path)));
    if (!taken) break;
  }
  std::string displaced;
  if (full) {
    displaced = worst->second;
    kept_.erase(worst);
  }
  kept_.emplace_back(score, path);
  // The state saved with it already lists it.
  RETURN_IF_ERROR(context.SaveCheckpoint(path));
  if (!displaced.empty() && displaced != path) {
    RETURN_IF_ERROR(context.RemoveCheckpoint(displaced));
  }
  return absl::OkStatus();
}

std::vector<std::pair<double, std::string>> ModelCheckpoint::kept() const {
  std::vector<std::pair<double, std::string>> sorted = kept_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [this](const auto& a, const auto& b) { return Better(a.first, b.first); });
  return sorted;
}

std::string ModelCheckpoint::best_model_path() const {
  return kept_.empty() ? "" : kept().front().second;
}

double ModelCheckpoint::best_model_score() const {
  return kept_.empty() ? std::nan("") : kept().front().first;
}

std::string ModelCheckpoint::OnSaveCheckpoint() const {
  std::string state;
  for (const auto& [score, path] : kept_) absl::StrAppendFormat(&state, "%.17g\t%s\n", score, path);
  return state;
}

absl::Status ModelCheckpoint::OnLoadCheckpoint(absl::string_view state) {
  std::vector<std::pair<double, std::string>> kept;
  for (absl::string_view line : absl::StrSplit(state, '\n', absl::SkipEmpty())) {
    const size_t tab = line.find('\t');
    double score = 0;
    if (tab == absl::string_view::npos || !absl::SimpleAtod(line.substr(0, tab), &score)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the checkpoint's ModelCheckpoint state line '", line, "' is not readable"));
    }
    kept.emplace_back(score, std::string(line.substr(tab + 1)));
  }
  kept_ = std::move(kept);
  return absl::OkStatus();
}

}  // namespace ddpspawn
