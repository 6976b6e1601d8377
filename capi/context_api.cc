// The C ABI inside a worker: a context (cluster environment + process group) and the collectives on
// plain buffers.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "capi/context.h"
#include "capi/status.h"
#include "core/comm/process_group.h"
#include "core/env/cluster_environment.h"
#include "core/launch/worker_channel.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn.h"

using ddpspawn::capi::BytesArgument;
using ddpspawn::capi::NotNull;
using ddpspawn::capi::ReadOptions;
using ddpspawn::capi::StatusCodeOf;
using ddpspawn::capi::ToReduceOp;

namespace {

// The most bytes one rank may pass to ddpspawn_broadcast_bytes and ddpspawn_all_gather_bytes (1
// GiB, as ddpspawn.h says): every rank allocates the broadcast, and world_size times the longest
// contribution to a gather.
constexpr size_t kMaxCollectiveBytes = size_t{1} << 30;

absl::Status CheckContext(const ddpspawn_context* context) { return NotNull(context, "context"); }

absl::StatusOr<ddpspawn::DType> ToDType(int32_t dtype) {
  switch (dtype) {
    case DDPSPAWN_FLOAT32:
      return ddpspawn::DType::kFloat32;
    case DDPSPAWN_FLOAT64:
      return ddpspawn::DType::kFloat64;
    case DDPSPAWN_INT32:
      return ddpspawn::DType::kInt32;
    case DDPSPAWN_INT64:
      return ddpspawn::DType::kInt64;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype ", dtype,
      "; expected DDPSPAWN_FLOAT32, DDPSPAWN_FLOAT64, DDPSPAWN_INT32 or DDPSPAWN_INT64"));
}

// Validates a buffer collective's common arguments.
absl::StatusOr<ddpspawn::DType> CheckBuffer(const ddpspawn_context* context, const void* data,
                                            size_t count, int32_t dtype) {
  RETURN_IF_ERROR(CheckContext(context));
  if (count > 0) {
    RETURN_IF_ERROR(NotNull(data, "data"));
  }
  if (count > static_cast<size_t>(INT64_MAX) / 8) {
    return absl::InvalidArgumentError(absl::StrCat("count ", count, " is too large"));
  }
  return ToDType(dtype);
}

// Copies `bytes` into memory the caller frees with ddpspawn_free.
void* CopyOut(absl::string_view bytes) {
  // Never true (collectives cap their sizes); it tells GCC's allocation-size check that the size is
  // bounded.
  if (bytes.size() > static_cast<size_t>(PTRDIFF_MAX)) return nullptr;
  void* out = std::malloc(bytes.empty() ? 1 : bytes.size());
  if (out != nullptr && !bytes.empty()) std::memcpy(out, bytes.data(), bytes.size());
  return out;
}

}  // namespace

namespace ddpspawn::capi {

absl::StatusOr<ReduceOp> ToReduceOp(int32_t op) {
  switch (op) {
    case DDPSPAWN_SUM:
      return ReduceOp::kSum;
    case DDPSPAWN_MEAN:
      return ReduceOp::kMean;
    case DDPSPAWN_MIN:
      return ReduceOp::kMin;
    case DDPSPAWN_MAX:
      return ReduceOp::kMax;
    case DDPSPAWN_PRODUCT:
      return ReduceOp::kProduct;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduce op ", op, "; expected DDPSPAWN_SUM, _MEAN, _MIN, _MAX or _PRODUCT"));
}

}  // namespace ddpspawn::capi

extern "C" {

DDPSPAWN_EXPORT void ddpspawn_context_options_init(ddpspawn_context_options* options) {
  if (options != nullptr) *options = DDPSPAWN_CONTEXT_OPTIONS_INIT;
}

DDPSPAWN_EXPORT ddpspawn_status
ddpspawn_context_options_init_sized(ddpspawn_context_options* options, uint32_t struct_size) {
  return ddpspawn::capi::StatusCodeOf([&]() -> absl::Status {
    const ddpspawn_context_options defaults = DDPSPAWN_CONTEXT_OPTIONS_INIT;
    return ddpspawn::capi::InitOptions(options, struct_size, "ddpspawn_context_options", defaults);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_context_create(const ddpspawn_context_options* options,
                                                        ddpspawn_context** out_context) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(out_context, "out_context"));
    ddpspawn_context_options o = DDPSPAWN_CONTEXT_OPTIONS_INIT;
    RETURN_IF_ERROR(ReadOptions(options, "DDPSPAWN_CONTEXT_OPTIONS", &o));
    if (!(o.timeout_s >= 0.0)) {
      return absl::InvalidArgumentError("timeout_s must be >= 0 (0: the default, 1800 s)");
    }
    ddpspawn::GroupOptions group_options;
    if (o.backend != nullptr) {
      ASSIGN_OR_RETURN(group_options.backend, ddpspawn::ParseBackend(o.backend));
    }
    if (o.timeout_s > 0.0) group_options.timeout = absl::Seconds(o.timeout_s);
    ASSIGN_OR_RETURN(ddpspawn::ClusterInfo cluster, ddpspawn::DetectClusterEnvironment());
    ddpspawn::InstallTerminateHandler();
    absl::StatusOr<std::unique_ptr<ddpspawn::ProcessGroup>> group =
        ddpspawn::ProcessGroup::Create(cluster, group_options);
    if (!group.ok()) return group.status();
    *out_context = new ddpspawn_context{*std::move(group),
                                        std::string(ddpspawn::ClusterKindName(cluster.kind)), ""};
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT void ddpspawn_context_destroy(ddpspawn_context* context) { delete context; }

DDPSPAWN_EXPORT int32_t ddpspawn_context_rank(const ddpspawn_context* context) {
  return context ? context->group->cluster().rank : -1;
}

DDPSPAWN_EXPORT int32_t ddpspawn_context_world_size(const ddpspawn_context* context) {
  return context ? context->group->cluster().world_size : -1;
}

DDPSPAWN_EXPORT int32_t ddpspawn_context_local_rank(const ddpspawn_context* context) {
  return context ? context->group->cluster().local_rank : -1;
}

DDPSPAWN_EXPORT int32_t ddpspawn_context_local_world_size(const ddpspawn_context* context) {
  return context ? context->group->cluster().local_world_size : -1;
}

DDPSPAWN_EXPORT int32_t ddpspawn_context_node_rank(const ddpspawn_context* context) {
  return context ? context->group->cluster().node_rank : -1;
}

DDPSPAWN_EXPORT const char* ddpspawn_context_environment(const ddpspawn_context* context) {
  return context ? context->environment.c_str() : "";
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_context_straggler(ddpspawn_context* context,
                                                           int32_t* out_measured,
                                                           int64_t* out_collectives,
                                                           int32_t* out_straggler,
                                                           const char** out_summary) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckContext(context));
    const ddpspawn::ArrivalReport report = context->group->arrivals();
    if (out_measured != nullptr) *out_measured = report.measured() ? 1 : 0;
    if (out_collectives != nullptr) *out_collectives = report.collectives;
    if (out_straggler != nullptr) *out_straggler = report.Straggler();
    if (out_summary != nullptr) {
      context->straggler_summary = report.Summary();
      *out_summary = context->straggler_summary.c_str();
    }
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_context_rank_arrivals(const ddpspawn_context* context,
                                                               int32_t rank,
                                                               int64_t* out_arrived_last,
                                                               double* out_late_seconds,
                                                               double* out_waited_seconds) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckContext(context));
    if (rank < 0 || rank >= context->group->world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is outside [0, ", context->group->world_size(), ")"));
    }
    // Every report has one entry per rank, measured or not.
    const ddpspawn::RankArrivals arrivals = context->group->arrivals().ranks[rank];
    if (out_arrived_last != nullptr) *out_arrived_last = arrivals.arrived_last;
    if (out_late_seconds != nullptr) *out_late_seconds = arrivals.late_seconds;
    if (out_waited_seconds != nullptr) *out_waited_seconds = arrivals.waited_seconds;
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_barrier(ddpspawn_context* context, const char* name) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckContext(context));
    return context->group->Barrier(name ? name : "");
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_broadcast(ddpspawn_context* context, void* data,
                                                   size_t count, int32_t dtype, int32_t src) {
  return StatusCodeOf([&]() -> absl::Status {
    ASSIGN_OR_RETURN(ddpspawn::DType type, CheckBuffer(context, data, count, dtype));
    return context->group->Broadcast(data, count, type, src);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_broadcast_bytes(ddpspawn_context* context,
                                                         const void* data, size_t size, int32_t src,
                                                         void** out_data, size_t* out_size) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckContext(context));
    // Only src's bytes are sent; the other ranks' data and size are ignored.
    absl::StatusOr<absl::string_view> bytes_in =
        context->group->rank() == src ? BytesArgument(data, size, kMaxCollectiveBytes, "size")
                                      : absl::string_view();
    if (!bytes_in.ok()) return bytes_in.status();
    RETURN_IF_ERROR(NotNull(out_data, "out_data"));
    RETURN_IF_ERROR(NotNull(out_size, "out_size"));
    ASSIGN_OR_RETURN(std::string bytes, context->group->BroadcastBytes(*bytes_in, src));
    void* copy = CopyOut(bytes);
    if (copy == nullptr) return absl::ResourceExhaustedError("out of memory");
    *out_data = copy;
    *out_size = bytes.size();
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_reduce(ddpspawn_context* context, void* data,
                                                    size_t count, int32_t dtype, int32_t op) {
  return StatusCodeOf([&]() -> absl::Status {
    ASSIGN_OR_RETURN(ddpspawn::DType type, CheckBuffer(context, data, count, dtype));
    ASSIGN_OR_RETURN(ddpspawn::ReduceOp reduce_op, ToReduceOp(op));
    return context->group->AllReduce(data, count, type, reduce_op);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce(ddpspawn_context* context, void* data, size_t count,
                                                int32_t dtype, int32_t op, int32_t dst) {
  return StatusCodeOf([&]() -> absl::Status {
    ASSIGN_OR_RETURN(ddpspawn::DType type, CheckBuffer(context, data, count, dtype));
    ASSIGN_OR_RETURN(ddpspawn::ReduceOp reduce_op, ToReduceOp(op));
    return context->group->Reduce(data, count, type, reduce_op, dst);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_gather(ddpspawn_context* context, const void* data,
                                                    size_t count, int32_t dtype, void* out) {
  return StatusCodeOf([&]() -> absl::Status {
    ASSIGN_OR_RETURN(ddpspawn::DType type, CheckBuffer(context, data, count, dtype));
    if (count > 0) {
      RETURN_IF_ERROR(NotNull(out, "out"));
    }
    return context->group->AllGather(data, count, type, out);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce_scatter(ddpspawn_context* context,
                                                        const void* input, void* output,
                                                        size_t count, int32_t dtype, int32_t op) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckContext(context));
    const size_t world = static_cast<size_t>(context->group->world_size());
    if (count > static_cast<size_t>(INT64_MAX) / 8 / world) {
      return absl::InvalidArgumentError(absl::StrCat("count ", count, " is too large"));
    }
    ASSIGN_OR_RETURN(ddpspawn::DType type, CheckBuffer(context, input, count * world, dtype));
    ASSIGN_OR_RETURN(ddpspawn::ReduceOp reduce_op, ToReduceOp(op));
    if (count > 0) {
      RETURN_IF_ERROR(NotNull(output, "output"));
    }
    return context->group->ReduceScatter(input, output, count, type, reduce_op);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_gather_bytes(ddpspawn_context* context,
                                                          const void* data, size_t size,
                                                          void** out_data, size_t* out_sizes) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckContext(context));
    absl::StatusOr<absl::string_view> bytes_in =
        BytesArgument(data, size, kMaxCollectiveBytes, "size");
    if (!bytes_in.ok()) return bytes_in.status();
    RETURN_IF_ERROR(NotNull(out_data, "out_data"));
    RETURN_IF_ERROR(NotNull(out_sizes, "out_sizes"));
    ASSIGN_OR_RETURN(std::vector<std::string> gathered, context->group->AllGatherBytes(*bytes_in));
    std::string joined;
    for (const std::string& part : gathered) joined += part;
    void* copy = CopyOut(joined);
    if (copy == nullptr) return absl::ResourceExhaustedError("out of memory");
    for (size_t r = 0; r < gathered.size(); ++r) out_sizes[r] = gathered[r].size();
    *out_data = copy;
    return absl::OkStatus();
  });
}

}  // extern "C"
