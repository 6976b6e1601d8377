// CustomCommHook: a bucket handed to C callbacks, and their failures as statuses (see
// custom_comm_hook.h and ddpspawn.h).
#include "capi/custom_comm_hook.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "capi/status.h"
#include "core/util/status_macros.h"

namespace ddpspawn::capi {
namespace {

absl::StatusOr<int32_t> DTypeCode(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DDPSPAWN_FLOAT32;
    case at::kDouble:
      return DDPSPAWN_FLOAT64;
    case at::kInt:
      return DDPSPAWN_INT32;
    case at::kLong:
      return DDPSPAWN_INT64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a C comm hook cannot take a bucket of ", at::toString(type)));
  }
}

// Runs the callbacks' wait when the reducer waits for the bucket.
class CustomReduction : public PendingReduction {
 public:
  explicit CustomReduction(std::function<absl::Status()> wait) : wait_(std::move(wait)) {}
  absl::Status Wait() override { return wait_(); }

 private:
  std::function<absl::Status()> wait_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<CustomCommHook>> CustomCommHook::Create(
    const ddpspawn_comm_hook& table, std::shared_ptr<ProcessGroup> group) {
  if (table.struct_size != sizeof(ddpspawn_comm_hook)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ddpspawn_comm_hook.struct_size is ", table.struct_size,
                     "; set it to sizeof(ddpspawn_comm_hook), ", sizeof(ddpspawn_comm_hook)));
  }
  if (table.start == nullptr) {
    return absl::InvalidArgumentError("ddpspawn_comm_hook.start is NULL");
  }
  return std::shared_ptr<CustomCommHook>(new CustomCommHook(table, std::move(group)));
}

CustomCommHook::CustomCommHook(const ddpspawn_comm_hook& table, std::shared_ptr<ProcessGroup> group)
    : table_(table) {
  context_.group = std::move(group);
}

CustomCommHook::~CustomCommHook() {
  if (armed_ && table_.release != nullptr) table_.release(table_.user_data);
}

absl::Status CustomCommHook::Failed(const char* callback, int bucket, ddpspawn_status code) const {
  const std::string why = ddpspawn_last_error();
  return absl::Status(CodeFromStatus(code),
                      absl::StrCat("rank ", context_.group->rank(), ": the C comm hook's ",
                                   callback, " failed on bucket ", bucket, " with status ", code,
                                   why.empty() ? "" : ": ", why));
}

absl::StatusOr<std::unique_ptr<PendingReduction>> CustomCommHook::Start(ProcessGroup& group,
                                                                        GradBucket& bucket) {
  (void)group;  // the callbacks get context_, over the same group
  if (!bucket.buffer.device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        "rank ", context_.group->rank(), ": a C comm hook takes buckets in CPU memory; bucket ",
        bucket.index, " is on ", bucket.buffer.device().str()));
  }
  ASSIGN_OR_RETURN(const int32_t dtype, DTypeCode(bucket.buffer.scalar_type()));
  ddpspawn_bucket view = {};
  view.struct_size = sizeof(view);
  view.index = bucket.index;
  view.bucket_count = bucket.count;
  view.dtype = dtype;
  view.data = bucket.buffer.data_ptr();
  view.count = static_cast<size_t>(bucket.buffer.numel());
  void* work = nullptr;
  const ddpspawn_status started = table_.start(table_.user_data, &context_, &view, &work);
  if (started != DDPSPAWN_OK) return Failed("start", bucket.index, started);
  const int index = bucket.index;
  at::Tensor keep = bucket.buffer;  // alive until the wait
  return std::make_unique<CustomReduction>([this, index, work, keep]() -> absl::Status {
    if (table_.wait == nullptr) return absl::OkStatus();
    const ddpspawn_status waited = table_.wait(table_.user_data, &context_, work);
    if (waited != DDPSPAWN_OK) return Failed("wait", index, waited);
    return absl::OkStatus();
  });
}

}  // namespace ddpspawn::capi
