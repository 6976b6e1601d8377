// The C ABI of the gradient reducer: core/ddp's Reducer in manual mode over caller buffers (and the
// handle's creation, shared with dlpack_api.cc).
#include <ATen/ATen.h>

#include <cstddef>
#include <memory>

#include "capi/context.h"
#include "capi/custom_comm_hook.h"
#include "capi/reducer.h"
#include "capi/status.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/reducer.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn.h"

using ddpspawn::capi::NotNull;
using ddpspawn::capi::StatusCodeOf;

namespace {

absl::StatusOr<at::ScalarType> ToScalarType(int32_t dtype) {
  switch (dtype) {
    case DDPSPAWN_FLOAT32:
      return at::kFloat;
    case DDPSPAWN_FLOAT64:
      return at::kDouble;
    case DDPSPAWN_INT32:
      return at::kInt;
    case DDPSPAWN_INT64:
      return at::kLong;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", dtype));
}

}  // namespace

namespace ddpspawn::capi {

// The first releases' struct ended at find_unused_parameters.
template <>
struct ReleasedSizes<ddpspawn_reducer_options> {
  static constexpr size_t kSizes[] = {sizeof(ddpspawn_reducer_options),
                                      offsetof(ddpspawn_reducer_options, custom_comm_hook)};
};

absl::Status CreateReducer(ddpspawn_context* context, std::vector<at::Tensor> gradients,
                           const ddpspawn_reducer_options* options,
                           ddpspawn_reducer** out_reducer) {
  ddpspawn_reducer_options o = DDPSPAWN_REDUCER_OPTIONS_INIT;
  RETURN_IF_ERROR(ReadOptions(options, "DDPSPAWN_REDUCER_OPTIONS", &o));
  ReducerOptions reducer_options;
  reducer_options.bucket_cap_mb = o.bucket_cap_mb;
  reducer_options.first_bucket_cap_mb = o.first_bucket_cap_mb;
  reducer_options.find_unused_parameters = o.find_unused_parameters != 0;
  ASSIGN_OR_RETURN(CommHookKind hook_kind, ParseCommHook(o.comm_hook ? o.comm_hook : ""));
  // PowerSGD's state is kept, to read what it sent.
  ASSIGN_OR_RETURN(std::shared_ptr<PowerSgdState> powersgd,
                   MakePowerSgdState(hook_kind, o.powersgd_rank, o.powersgd_start_iteration));
  std::shared_ptr<CustomCommHook> custom;
  if (o.custom_comm_hook != nullptr) {
    if (hook_kind != CommHookKind::kAllReduce) {
      return absl::InvalidArgumentError(
          absl::StrCat("comm_hook \"", o.comm_hook,
                       "\" and a custom_comm_hook were both given; a reducer runs one hook"));
    }
    ASSIGN_OR_RETURN(custom, CustomCommHook::Create(*o.custom_comm_hook, context->group));
    reducer_options.comm_hook = custom;
  } else if (powersgd != nullptr) {
    reducer_options.comm_hook = MakePowerSgdHook(powersgd);
  } else {
    ASSIGN_OR_RETURN(reducer_options.comm_hook, MakeCommHook(hook_kind));
  }
  absl::StatusOr<std::unique_ptr<Reducer>> made = Reducer::Create(
      context->group.get(), std::move(gradients), reducer_options, /*autograd_mode=*/false);
  if (!made.ok()) {
    if (custom != nullptr) custom->Disarm();  // the caller keeps its hook's user_data
    return made.status();
  }
  std::unique_ptr<Reducer> reducer = *std::move(made);
  *out_reducer = new ddpspawn_reducer{context->group, std::move(reducer), std::move(powersgd)};
  return absl::OkStatus();
}

}  // namespace ddpspawn::capi

extern "C" {

DDPSPAWN_EXPORT void ddpspawn_reducer_options_init(ddpspawn_reducer_options* options) {
  if (options != nullptr) *options = DDPSPAWN_REDUCER_OPTIONS_INIT;
}

DDPSPAWN_EXPORT ddpspawn_status
ddpspawn_reducer_options_init_sized(ddpspawn_reducer_options* options, uint32_t struct_size) {
  return ddpspawn::capi::StatusCodeOf([&]() -> absl::Status {
    const ddpspawn_reducer_options defaults = DDPSPAWN_REDUCER_OPTIONS_INIT;
    return ddpspawn::capi::InitOptions(options, struct_size, "ddpspawn_reducer_options", defaults);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_create(ddpspawn_context* context,
                                                        void* const* buffers, const size_t* counts,
                                                        const int32_t* dtypes, size_t num_buffers,
                                                        const ddpspawn_reducer_options* options,
                                                        ddpspawn_reducer** out_reducer) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(context, "context"));
    RETURN_IF_ERROR(NotNull(out_reducer, "out_reducer"));
    if (num_buffers == 0)
      return absl::InvalidArgumentError("the reducer needs at least one buffer");
    RETURN_IF_ERROR(NotNull(buffers, "buffers"));
    RETURN_IF_ERROR(NotNull(counts, "counts"));
    RETURN_IF_ERROR(NotNull(dtypes, "dtypes"));
    std::vector<at::Tensor> tensors;
    for (size_t i = 0; i < num_buffers; ++i) {
      absl::StatusOr<at::ScalarType> type = ToScalarType(dtypes[i]);
      if (!type.ok())
        return absl::InvalidArgumentError(
            absl::StrCat("buffer ", i, ": ", type.status().message()));
      if (buffers[i] == nullptr || counts[i] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("buffer ", i, " is NULL or empty; every buffer needs elements"));
      }
      tensors.push_back(at::from_blob(buffers[i], {static_cast<int64_t>(counts[i])},
                                      at::TensorOptions().dtype(*type)));
    }
    return ddpspawn::capi::CreateReducer(context, std::move(tensors), options, out_reducer);
  });
}

DDPSPAWN_EXPORT void ddpspawn_reducer_destroy(ddpspawn_reducer* reducer) { delete reducer; }

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_mark_ready(ddpspawn_reducer* reducer,
                                                            size_t index) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    return reducer->reducer->MarkReady(index);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_finalize(ddpspawn_reducer* reducer) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    return reducer->reducer->Finalize();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_set_sync(ddpspawn_reducer* reducer,
                                                          int32_t enabled) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    reducer->reducer->set_sync_enabled(enabled != 0);
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT int32_t ddpspawn_reducer_bucket_count(const ddpspawn_reducer* reducer) {
  return reducer == nullptr ? -1 : static_cast<int32_t>(reducer->reducer->bucket_count());
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_written(const ddpspawn_reducer* reducer,
                                                         size_t index, int32_t* out_written) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    RETURN_IF_ERROR(NotNull(out_written, "out_written"));
    ASSIGN_OR_RETURN(bool written, reducer->reducer->WrittenByLastFinalize(index));
    *out_written = written ? 1 : 0;
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_compression(const ddpspawn_reducer* reducer,
                                                             int64_t* out_sent,
                                                             int64_t* out_dense) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    RETURN_IF_ERROR(NotNull(out_sent, "out_sent"));
    RETURN_IF_ERROR(NotNull(out_dense, "out_dense"));
    *out_sent = reducer->powersgd ? reducer->powersgd->last_sent_elements : 0;
    *out_dense = reducer->powersgd ? reducer->powersgd->last_dense_elements : 0;
    return absl::OkStatus();
  });
}

}  // extern "C"
