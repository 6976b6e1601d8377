// Per-bucket timing of DDP's backward for ddpspawn_bench (see bucket_timeline.h).
#include "tools/benchmarks/bucket_timeline.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddpspawn {
namespace {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr size_t kPerBucket = 4;

}  // namespace

BucketTimeline::BucketTimeline(std::shared_ptr<CommHook> inner, ProcessGroup* group)
    : inner_(std::move(inner)), group_(group) {}

void BucketTimeline::BeginBackward(bool timed) {
  timing_ = timed;
  if (timed) ++timed_steps_;
  backward_start_ = last_bucket_end_ = MonotonicSeconds();
}

void BucketTimeline::EndBackward() {
  if (!timing_) return;
  const double now = MonotonicSeconds();
  after_last_bucket_ += now - last_bucket_end_;
  backward_ += now - backward_start_;
}

absl::StatusOr<std::unique_ptr<PendingReduction>> BucketTimeline::Start(ProcessGroup& group,
                                                                        GradBucket& bucket) {
  if (!timing_) return inner_->Start(group, bucket);
  const auto waited = [this] {
    const ArrivalReport report = group_->arrivals();
    return report.ranks.empty() ? 0.0 : report.ranks[group_->rank()].waited_seconds;
  };
  const double waited_before = waited();
  const double start = MonotonicSeconds();
  absl::StatusOr<std::unique_ptr<PendingReduction>> started = inner_->Start(group, bucket);
  const double end = MonotonicSeconds();
  if (buckets_.size() <= static_cast<size_t>(bucket.index)) buckets_.resize(bucket.index + 1);
  BucketTimes& times = buckets_[bucket.index];
  times.megabytes = static_cast<double>(bucket.buffer.nbytes()) / 1e6;
  times.started += start - backward_start_;
  times.in_start += end - start;
  times.waited += waited() - waited_before;
  last_bucket_end_ = end;
  return started;
}

std::vector<double> BucketTimeline::Flatten() const {
  const double per_step = timed_steps_ > 0 ? 1e3 / timed_steps_ : 0;
  std::vector<double> flat;
  for (const BucketTimes& b : buckets_) {
    flat.insert(flat.end(),
                {b.megabytes, b.started * per_step, b.in_start * per_step, b.waited * per_step});
  }
  flat.push_back(after_last_bucket_ * per_step);
  flat.push_back(backward_ * per_step);
  return flat;
}

std::string BucketTimeline::ToJson(const std::vector<double>& all, int world_size) {
  const size_t per_rank = all.size() / static_cast<size_t>(world_size);
  const size_t buckets = (per_rank - 2) / kPerBucket;
  std::string json = "[";
  for (int r = 0; r < world_size; ++r) {
    const double* p = &all[per_rank * static_cast<size_t>(r)];
    absl::StrAppend(&json, r == 0 ? "" : ", ", "{\"buckets\": [");
    for (size_t b = 0; b < buckets; ++b, p += kPerBucket) {
      absl::StrAppendFormat(&json,
                            "%s{\"mb\": %.2f, \"started_ms\": %.3f, \"in_start_ms\": %.3f, "
                            "\"waited_ms\": %.3f}",
                            b == 0 ? "" : ", ", p[0], p[1], p[2], p[3]);
    }
    absl::StrAppendFormat(&json, "], \"after_last_bucket_ms\": %.3f, \"backward_ms\": %.3f}", p[0],
                          p[1]);
  }
  return json + "]";
}

}  // namespace ddpspawn
