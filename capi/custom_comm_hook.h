// A communication hook given through the C ABI (ddpspawn_comm_hook): the core's CommHook over a
// table of C function pointers.
#ifndef DDPSPAWN_CAPI_CUSTOM_COMM_HOOK_H_
#define DDPSPAWN_CAPI_CUSTOM_COMM_HOOK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "capi/context.h"
#include "core/ddp/comm_hooks.h"
#include "ddpspawn/ddpspawn.h"

namespace ddpspawn::capi {

// Thread safety: as CommHook (the reducer calls it under its mutex). Ownership: shares the
// reducer's group through a context it hands the callbacks; calls the table's release(user_data)
// once, when destroyed, unless Disarm()ed (a reducer whose creation failed leaves user_data to its
// caller).
class CustomCommHook : public CommHook {
 public:
  // InvalidArgument for a table without `start` or of no released size.
  static absl::StatusOr<std::shared_ptr<CustomCommHook>> Create(
      const ddpspawn_comm_hook& table, std::shared_ptr<ProcessGroup> group);
  ~CustomCommHook() override;
  std::string name() const override { return "custom (C ABI)"; }
  absl::StatusOr<std::unique_ptr<PendingReduction>> Start(ProcessGroup& group,
                                                          GradBucket& bucket) override;
  void Disarm() { armed_ = false; }

 private:
  CustomCommHook(const ddpspawn_comm_hook& table, std::shared_ptr<ProcessGroup> group);
  // The callback's failure as a status: its code, the rank, the bucket and this thread's last error
  // (the callback's or its failed collective's).
  absl::Status Failed(const char* callback, int bucket, ddpspawn_status code) const;

  ddpspawn_comm_hook table_;
  ddpspawn_context context_;
  bool armed_ = true;
};

}  // namespace ddpspawn::capi

#endif  // DDPSPAWN_CAPI_CUSTOM_COMM_HOOK_H_
