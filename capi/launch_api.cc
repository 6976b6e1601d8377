// The C ABI of the launcher: jobs (of one node, or one node's part of several through node 0's
// rendezvous), their reports, and the worker side's result and error.
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "capi/rank_report.h"
#include "capi/status.h"
#include "core/env/cluster_environment.h"
#include "core/env/settings.h"
#include "core/job/node_job.h"
#include "core/job/restart_policy.h"
#include "core/launch/forkserver.h"
#include "core/launch/launcher.h"
#include "core/launch/worker_channel.h"
#include "core/util/status_macros.h"
#include "ddpspawn/ddpspawn.h"

using ddpspawn::capi::NotNull;
using ddpspawn::capi::ReadOptions;
using ddpspawn::capi::StatusCodeOf;

namespace ddpspawn::capi {

// The first release's struct ended at unused0 (master_port and its padding), the second at
// node_rank.
template <>
struct ReleasedSizes<ddpspawn_launch_options> {
  static constexpr size_t kSizes[] = {sizeof(ddpspawn_launch_options),
                                      offsetof(ddpspawn_launch_options, max_restarts),
                                      offsetof(ddpspawn_launch_options, nnodes)};
};

}  // namespace ddpspawn::capi

// Owned by the caller; one thread uses it at a time.
struct ddpspawn_job {
  std::unique_ptr<ddpspawn::NodeJob> job;
  ddpspawn::LaunchSpec spec;  // each start's, for a restart
  int max_restarts = 0;
  int restarts = 0;
};

namespace {

std::vector<std::string> StringList(const char* const* list) {
  std::vector<std::string> out;
  for (; list != nullptr && *list != nullptr; ++list) out.emplace_back(*list);
  return out;
}

std::function<void()> Hook(ddpspawn_fork_hook hook) {
  if (hook == nullptr) return nullptr;
  return [hook] { hook(); };
}

absl::Duration Seconds(double seconds, absl::Duration if_zero) {
  return seconds == 0.0 ? if_zero : absl::Seconds(seconds);
}

absl::StatusOr<ddpspawn::LaunchSpec> ToSpec(const ddpspawn_launch_options& o) {
  ddpspawn::LaunchSpec spec;
  spec.nprocs = o.nprocs;
  absl::StatusOr<ddpspawn::StartMethod> method =
      ddpspawn::ParseStartMethod(o.start_method ? o.start_method : "spawn");
  if (!method.ok()) return method.status();
  spec.start_method = *method;
  spec.argv = StringList(o.argv);
  spec.env = StringList(o.env);
  if (o.worker_fn != nullptr) {
    ddpspawn_worker_fn fn = o.worker_fn;
    void* user_data = o.user_data;
    spec.worker = [fn, user_data](int rank) { return fn(rank, user_data); };
  }
  spec.fork_hooks = {Hook(o.before_fork), Hook(o.after_fork_parent), Hook(o.after_fork_child)};
  // worker_fn runs on the thread that forked, with the caller's descriptors open (see
  // ddpspawn_worker_fn in the header): a foreign runtime's callback may need that thread (CPython's
  // holds the GIL there) and its open files.
  spec.fork_worker_thread = false;
  spec.fork_close_descriptors = false;
  if (!(o.timeout_s >= 0.0) || !(o.grace_period_s >= 0.0)) {
    return absl::InvalidArgumentError(
        "timeout_s and grace_period_s must be >= 0 (0 timeout: none)");
  }
  spec.timeout = Seconds(o.timeout_s, absl::InfiniteDuration());
  spec.grace_period = absl::Seconds(o.grace_period_s);
  if (o.master_addr != nullptr) spec.master_addr = o.master_addr;
  spec.master_port = o.master_port;
  spec.nnodes = o.nnodes == 0 ? 1 : o.nnodes;  // 0: the default, as for the other fields
  spec.node_rank = o.node_rank;
  return spec;
}

// This launcher's place in the job. The job every node checks the others against: the start method
// and the program.
ddpspawn::NodeJobOptions ToNodeOptions(const ddpspawn_launch_options& o,
                                       const ddpspawn::LaunchSpec& spec) {
  ddpspawn::NodeJobOptions node;
  if (o.master_addr != nullptr) node.master_addr = o.master_addr;
  node.master_port = o.master_port;
  node.nnodes = spec.nnodes;
  node.node_rank = o.node_rank;
  node.rendezvous_timeout =
      spec.timeout == absl::InfiniteDuration() ? ddpspawn::kDefaultTimeout : spec.timeout;
  const std::string program =
      spec.argv.empty() ? "worker_fn" : std::filesystem::path(spec.argv[0]).filename().string();
  node.description =
      absl::StrCat("ddpspawn_job ", ddpspawn::StartMethodName(spec.start_method), " ", program);
  return node;
}

absl::Status CheckRank(const ddpspawn_job* job, int32_t rank) {
  RETURN_IF_ERROR(NotNull(job, "job"));
  if (rank < 0 || rank >= job->job->nprocs()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ", job->job->nprocs(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" {

DDPSPAWN_EXPORT void ddpspawn_launch_options_init(ddpspawn_launch_options* options) {
  if (options != nullptr) *options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_launch_options_init_sized(ddpspawn_launch_options* options,
                                                                   uint32_t struct_size) {
  return ddpspawn::capi::StatusCodeOf([&]() -> absl::Status {
    const ddpspawn_launch_options defaults = DDPSPAWN_LAUNCH_OPTIONS_INIT;
    return ddpspawn::capi::InitOptions(options, struct_size, "ddpspawn_launch_options", defaults);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_create(const ddpspawn_launch_options* options,
                                                    ddpspawn_job** out_job) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(options, "options"));
    RETURN_IF_ERROR(NotNull(out_job, "out_job"));
    ddpspawn_launch_options o = DDPSPAWN_LAUNCH_OPTIONS_INIT;
    RETURN_IF_ERROR(ReadOptions(options, "DDPSPAWN_LAUNCH_OPTIONS", &o));
    ASSIGN_OR_RETURN(ddpspawn::LaunchSpec spec, ToSpec(o));
    if (o.max_restarts < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_restarts must be >= 0, not ", o.max_restarts));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<ddpspawn::NodeJob> job,
                     ddpspawn::NodeJob::Create(ToNodeOptions(o, spec)));
    RETURN_IF_ERROR(job->Prepare(spec));
    *out_job = new ddpspawn_job{std::move(job), std::move(spec), o.max_restarts, 0};
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT void ddpspawn_job_destroy(ddpspawn_job* job) { delete job; }

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_start(ddpspawn_job* job) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(job, "job"));
    return job->job->Start();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_wait(ddpspawn_job* job) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(job, "job"));
    // The first attempt was started by ddpspawn_job_start.
    bool started = true;
    ddpspawn::RestartSteps steps;
    steps.run_attempt = [&]() -> absl::Status {
      if (!started) RETURN_IF_ERROR(job->job->Start());
      started = false;
      return job->job->Wait();
    };
    steps.decline = [&](const std::string& why) { job->job->DeclineRestart(why); };
    // The program keeps its own state: no checkpoint is handed on.
    steps.agree_resume_point = [&]() { return job->job->PrepareRestart(""); };
    steps.prepare_next = [&](const std::string&) { return job->job->Prepare(job->spec); };
    return ddpspawn::RunWithRestarts(steps, job->max_restarts, job->restarts);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_run(ddpspawn_job* job) {
  ddpspawn_status started = ddpspawn_job_start(job);
  return started == DDPSPAWN_OK ? ddpspawn_job_wait(job) : started;
}

DDPSPAWN_EXPORT int32_t ddpspawn_job_nprocs(const ddpspawn_job* job) {
  return job == nullptr ? -1 : job->job->nprocs();
}

DDPSPAWN_EXPORT int32_t ddpspawn_job_restarts(const ddpspawn_job* job) {
  return job == nullptr ? -1 : job->restarts;
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_rank_report_init_sized(ddpspawn_rank_report* report,
                                                                uint32_t struct_size) {
  return ddpspawn::capi::StatusCodeOf([&]() -> absl::Status {
    const ddpspawn_rank_report defaults = DDPSPAWN_RANK_REPORT_INIT;
    return ddpspawn::capi::InitOptions(report, struct_size, "ddpspawn_rank_report", defaults);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_rank_report(const ddpspawn_job* job, int32_t rank,
                                                         ddpspawn_rank_report* out_report) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckRank(job, rank));
    return ddpspawn::capi::FillRankReport(job->job->outcomes()[rank], out_report);
  });
}

DDPSPAWN_EXPORT int32_t ddpspawn_job_failed_rank(const ddpspawn_job* job) {
  return job == nullptr ? -1 : job->job->failed_rank();
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_rank_error(const ddpspawn_job* job, int32_t rank,
                                                        const char** out_text) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckRank(job, rank));
    RETURN_IF_ERROR(NotNull(out_text, "out_text"));
    *out_text = job->job->outcomes()[rank].error_text.c_str();
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_result(const ddpspawn_job* job, const void** out_data,
                                                    size_t* out_size, int32_t* out_has_result) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(job, "job"));
    RETURN_IF_ERROR(NotNull(out_data, "out_data"));
    RETURN_IF_ERROR(NotNull(out_size, "out_size"));
    RETURN_IF_ERROR(NotNull(out_has_result, "out_has_result"));
    const std::optional<std::string>& result = job->job->result();
    *out_data = result ? result->data() : nullptr;
    *out_size = result ? result->size() : 0;
    *out_has_result = result ? 1 : 0;
    return absl::OkStatus();
  });
}

DDPSPAWN_EXPORT int32_t ddpspawn_serve_forks_if_forkserver(void) {
  // The server's own variable is gone from a rank's environment.
  const bool was_server = std::getenv(ddpspawn::kForkserverFdEnv) != nullptr;
  ddpspawn::ServeForksIfForkserver();
  return was_server ? 1 : 0;
}

DDPSPAWN_EXPORT int32_t ddpspawn_is_worker(void) { return ddpspawn::IsLaunchedWorker() ? 1 : 0; }

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_worker_set_result(const void* data, size_t size) {
  return StatusCodeOf([&]() -> absl::Status {
    // Any size a buffer can have (absl::string_view's limit, PTRDIFF_MAX).
    absl::StatusOr<absl::string_view> bytes =
        ddpspawn::capi::BytesArgument(data, size, absl::string_view().max_size(), "size");
    if (!bytes.ok()) return bytes.status();
    return ddpspawn::SetWorkerResult(*bytes);
  });
}

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_worker_set_error(const char* text) {
  return StatusCodeOf([&]() -> absl::Status {
    RETURN_IF_ERROR(NotNull(text, "text"));
    return ddpspawn::SetWorkerError(text);
  });
}

}  // extern "C"
