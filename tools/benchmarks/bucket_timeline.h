// ddpspawn_bench --timeline 1: where a DDP step's backward spends its time, bucket by bucket.
// BucketTimeline wraps the reducer's communication hook and, for each bucket of each timed step,
// records when its reduction started (its last gradient was ready and copied into the bucket), how
// long starting it took (a shared-memory sum runs there, inline, waits included), and how long this
// rank waited for the others at that collective (from the arrivals the shared-memory header
// stamps).
//
// Thread-compatible: the reducer starts buckets on the backward thread, and the bench reads the
// summary after training. Ownership: holds the inner hook; borrows the group, which must outlive
// it.
#ifndef DDPSPAWN_TOOLS_BENCHMARKS_BUCKET_TIMELINE_H_
#define DDPSPAWN_TOOLS_BENCHMARKS_BUCKET_TIMELINE_H_

#include <memory>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"

namespace ddpspawn {

class BucketTimeline : public CommHook {
 public:
  BucketTimeline(std::shared_ptr<CommHook> inner, ProcessGroup* group);

  // Around loss.backward() of every step; only steps begun with timed=true count.
  void BeginBackward(bool timed);
  void EndBackward();

  std::string name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                          GradBucket& bucket) override;

  // This rank's means over the timed steps, in ms, flat for an all-gather: per bucket {bytes / 1e6,
  // started, in_start, waited}, then the time from the last bucket's end to backward's return (the
  // reducer's finalize), then backward's length.
  std::vector<double> Flatten() const;
  // `all` is every rank's Flatten(), back to back: a JSON array of ranks.
  static std::string ToJson(const std::vector<double>& all, int world_size);

 private:
  struct BucketTimes {
    double megabytes = 0, started = 0, in_start = 0, waited = 0;
  };
  std::shared_ptr<CommHook> inner_;
  ProcessGroup* group_;
  std::vector<BucketTimes> buckets_;  // sums over the timed steps, in seconds
  bool timing_ = false;
  int timed_steps_ = 0;
  double backward_start_ = 0, last_bucket_end_ = 0, after_last_bucket_ = 0, backward_ = 0;
};

}  // namespace ddpspawn

#endif  // DDPSPAWN_TOOLS_BENCHMARKS_BUCKET_TIMELINE_H_
