// The Trainer's evaluation loops (see trainer.h): validate, test and predict over every rank's
// shard, and the shard iteration they share.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/train/data/sampler.h"
#include "core/train/loop/logged_metrics.h"
#include "core/train/loop/metric_sync.h"
#include "core/train/loop/stop_signal.h"
#include "core/train/loop/trainer.h"
#include "core/util/status_macros.h"

namespace ddpspawn {

absl::StatusOr<std::vector<int64_t>> Trainer::ForEachShardBatch(
    LightningModule& module, const Dataset& data, bool exactly_once, const BatchAmount& limit,
    absl::string_view option,
    const std::function<absl::Status(const Batch&, int64_t, bool)>& step) {
  const int world = strategy_.world_size(), rank = strategy_.global_rank();
  absl::StatusOr<DistributedSampler> sampler =
      DistributedSampler::Create(data.size(), world, rank,
                                 /*shuffle=*/false, 0, /*drop_last=*/false);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data ", data.source, ": ", sampler.status().message()));
  }
  ASSIGN_OR_RETURN(const int64_t limited,
                   limit.Of(BatchCount(sampler->num_samples(), options_.batch_size), option));
  if (limited == 0) {
    return absl::InvalidArgumentError(absl::StrCat(option, "=0 runs no batch"));
  }
  const int64_t cap = limited * options_.batch_size;  // samples
  module.SetTraining(false);
  std::vector<int64_t> indices = sampler->Indices();
  bool counted = true;
  if (exactly_once) {
    // Without shuffling, rank r's k-th sample is position r + k * world of the padded order, which
    // repeats a sample from position data.size() on.
    const int64_t own =
        std::min<int64_t>(cap, rank < data.size() ? (data.size() - rank + world - 1) / world : 0);
    indices.resize(static_cast<size_t>(std::max<int64_t>(own, 1)));
    counted = own > 0;
  } else {
    indices.resize(static_cast<size_t>(std::min<int64_t>(cap, sampler->num_samples())));
  }
  const int64_t samples = static_cast<int64_t>(indices.size());
  const int64_t batches = BatchCount(samples, options_.batch_size);
  for (int64_t b = 0; b < batches; ++b) {
    ASSIGN_OR_RETURN(Batch batch,
                     ReadBatch(data, indices, b * options_.batch_size,
                               BatchEnd(b, options_.batch_size, samples), options_.num_workers));
    RETURN_IF_ERROR(step(batch, b, counted));
  }
  return indices;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Evaluate(
    const std::shared_ptr<LightningModule>& module, const Dataset& data, bool test,
    const BatchAmount& limit, absl::string_view option) {
  // Whole under full_shard: the ranks' shards of the evaluation set may differ in length, so a
  // unit's gather there could meet no partner.
  return WithParametersWhole(strategy_,
                             [&] { return EvaluateWhole(module, data, test, limit, option); });
}

absl::StatusOr<std::map<std::string, double>> Trainer::EvaluateWhole(
    const std::shared_ptr<LightningModule>& module, const Dataset& data, bool test,
    const BatchAmount& limit, absl::string_view option) {
  std::map<std::string, double> sums;
  double samples = 0;
  absl::StatusOr<std::vector<int64_t>> done = ForEachShardBatch(
      *module, data, /*exactly_once=*/true, limit, option,
      [&](const Batch& batch, int64_t b, bool counted) -> absl::Status {
        absl::StatusOr<StepMetrics> metrics =
            test ? strategy_.TestStep(batch, b) : strategy_.ValidationStep(batch, b);
        if (!metrics.ok()) return metrics.status();
        // An uncounted batch only names the metrics (its value may be anything).
        const double size = static_cast<double>(batch[0].size(0));
        for (const auto& [name, value] : *metrics) {
          sums[name] += counted ? value.item<double>() * size : 0.0;
        }
        if (counted) samples += size;
        return absl::OkStatus();
      });
  if (!done.ok()) return done.status();
  RETURN_IF_ERROR(AgreeOnMetricNames(strategy_, sums, test ? "test_step" : "validation_step"));
  // Weighted by samples, summed over the ranks (the names agree).
  std::vector<double> flat;
  flat.reserve(sums.size() + 1);
  for (const auto& [name, sum] : sums) flat.push_back(sum);
  flat.push_back(samples);
  ASSIGN_OR_RETURN(at::Tensor total,
                   strategy_.Reduce(at::tensor(flat, at::kDouble), ReduceOp::kSum));
  std::map<std::string, double> means;
  size_t i = 0;
  const double count = total[total.size(0) - 1].item<double>();
  for (const auto& [name, sum] : sums) means[name] = total[i++].item<double>() / count;
  return means;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Validate(
    const std::shared_ptr<LightningModule>& module, const Dataset& data) {
  RETURN_IF_ERROR(Prepare(module));
  return Evaluate(module, data, false, options_.limit_val_batches, "limit_val_batches");
}

absl::StatusOr<std::map<std::string, double>> Trainer::Test(
    const std::shared_ptr<LightningModule>& module, const Dataset& data) {
  RETURN_IF_ERROR(Prepare(module));
  return Evaluate(module, data, true, options_.limit_test_batches, "limit_test_batches");
}

absl::StatusOr<at::Tensor> Trainer::Predict(const std::shared_ptr<LightningModule>& module,
                                            const Dataset& data) {
  RETURN_IF_ERROR(Prepare(module));
  std::vector<at::Tensor> outputs;
  absl::StatusOr<std::vector<int64_t>> indices = WithParametersWhole(strategy_, [&] {
    return ForEachShardBatch(*module, data, /*exactly_once=*/false, options_.limit_predict_batches,
                             "limit_predict_batches",
                             [&](const Batch& batch, int64_t b, bool) -> absl::Status {
                               ASSIGN_OR_RETURN(at::Tensor out, strategy_.PredictStep(batch, b));
                               outputs.push_back(out.detach().cpu().contiguous());
                               return absl::OkStatus();
                             });
  });
  if (!indices.ok()) return indices.status();
  ASSIGN_OR_RETURN(at::Tensor all, strategy_.AllGather(at::cat(outputs)));
  ASSIGN_OR_RETURN(at::Tensor all_indices, strategy_.AllGather(at::tensor(*indices, at::kLong)));
  if (!strategy_.is_global_zero()) return at::Tensor();
  // Scatter back into dataset order; padding repeats a sample with the same prediction.
  // limit_predict_batches keeps each rank's first batches, which together are the dataset's first
  // samples (the shards are strided).
  at::Tensor flat = all.flatten(0, 1);
  std::vector<int64_t> shape = flat.sizes().vec();
  shape[0] = std::min<int64_t>(data.size(), all_indices.max().item<int64_t>() + 1);
  at::Tensor ordered = at::empty(shape, flat.options());
  ordered.index_copy_(0, all_indices.flatten(), flat);
  return ordered;
}

}  // namespace ddpspawn
