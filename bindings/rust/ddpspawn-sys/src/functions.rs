//! The C ABI's functions, as `ddpspawn/ddpspawn.h` declares them (re-exported
//! at the crate root): errors and versions, the launcher, the worker side and
//! its collectives, the gradient reducer, training runs.

use std::os::raw::{c_char, c_void};

use crate::{
    ddpspawn_context, ddpspawn_context_options, ddpspawn_job, ddpspawn_launch_options,
    ddpspawn_rank_report, ddpspawn_reducer, ddpspawn_reducer_options, ddpspawn_run_result,
    ddpspawn_status,
};

crate::dynamic_functions! {
    // Errors and versions.
    pub fn ddpspawn_last_error() -> *const c_char;
    pub fn ddpspawn_set_last_error(
        code: ddpspawn_status,
        message: *const c_char,
    ) -> ddpspawn_status;
    pub fn ddpspawn_abi_version() -> i32;
    pub fn ddpspawn_version() -> *const c_char;
    pub fn ddpspawn_build_info() -> *const c_char;
    pub fn ddpspawn_free(ptr: *mut c_void);

    // Launcher.
    pub fn ddpspawn_launch_options_init(options: *mut ddpspawn_launch_options);
    /// Writes the library's defaults into the first `struct_size` bytes of
    /// `options` only (pass `size_of::<ddpspawn_launch_options>()`).
    pub fn ddpspawn_launch_options_init_sized(
        options: *mut ddpspawn_launch_options,
        struct_size: u32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_job_create(
        options: *const ddpspawn_launch_options,
        out_job: *mut *mut ddpspawn_job,
    ) -> ddpspawn_status;
    pub fn ddpspawn_job_destroy(job: *mut ddpspawn_job);
    pub fn ddpspawn_job_start(job: *mut ddpspawn_job) -> ddpspawn_status;
    pub fn ddpspawn_job_wait(job: *mut ddpspawn_job) -> ddpspawn_status;
    pub fn ddpspawn_job_run(job: *mut ddpspawn_job) -> ddpspawn_status;
    /// `DDPSPAWN_RANK_REPORT_INIT` from the library, as
    /// `ddpspawn_launch_options_init_sized`.
    pub fn ddpspawn_rank_report_init_sized(
        report: *mut ddpspawn_rank_report,
        struct_size: u32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_job_nprocs(job: *const ddpspawn_job) -> i32;
    pub fn ddpspawn_job_restarts(job: *const ddpspawn_job) -> i32;
    pub fn ddpspawn_job_rank_report(
        job: *const ddpspawn_job,
        rank: i32,
        out_report: *mut ddpspawn_rank_report,
    ) -> ddpspawn_status;
    pub fn ddpspawn_job_failed_rank(job: *const ddpspawn_job) -> i32;
    pub fn ddpspawn_job_rank_error(
        job: *const ddpspawn_job,
        rank: i32,
        out_text: *mut *const c_char,
    ) -> ddpspawn_status;
    pub fn ddpspawn_job_result(
        job: *const ddpspawn_job,
        out_data: *mut *const c_void,
        out_size: *mut usize,
        out_has_result: *mut i32,
    ) -> ddpspawn_status;

    // Inside a worker.
    pub fn ddpspawn_serve_forks_if_forkserver() -> i32;
    pub fn ddpspawn_is_worker() -> i32;
    pub fn ddpspawn_worker_set_result(data: *const c_void, size: usize) -> ddpspawn_status;
    pub fn ddpspawn_worker_set_error(text: *const c_char) -> ddpspawn_status;

    pub fn ddpspawn_context_options_init(options: *mut ddpspawn_context_options);
    /// As `ddpspawn_launch_options_init_sized`.
    pub fn ddpspawn_context_options_init_sized(
        options: *mut ddpspawn_context_options,
        struct_size: u32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_context_create(
        options: *const ddpspawn_context_options,
        out_context: *mut *mut ddpspawn_context,
    ) -> ddpspawn_status;
    pub fn ddpspawn_context_destroy(context: *mut ddpspawn_context);

    pub fn ddpspawn_context_rank(context: *const ddpspawn_context) -> i32;
    pub fn ddpspawn_context_world_size(context: *const ddpspawn_context) -> i32;
    pub fn ddpspawn_context_local_rank(context: *const ddpspawn_context) -> i32;
    pub fn ddpspawn_context_local_world_size(context: *const ddpspawn_context) -> i32;
    pub fn ddpspawn_context_node_rank(context: *const ddpspawn_context) -> i32;
    pub fn ddpspawn_context_environment(context: *const ddpspawn_context) -> *const c_char;
    /// Which rank holds the others back: whether arrivals are timed, the
    /// collectives timed, the rank that arrived last most often (-1: none)
    /// and a summary owned by the context until the next call. Any out
    /// pointer may be NULL; may run while another thread runs a collective.
    pub fn ddpspawn_context_straggler(
        context: *mut ddpspawn_context,
        out_measured: *mut i32,
        out_collectives: *mut i64,
        out_straggler: *mut i32,
        out_summary: *mut *const c_char,
    ) -> ddpspawn_status;
    /// Rank `rank`'s arrivals: collectives it reached last, how much later
    /// than the next-latest rank summed over those (s), and how long it
    /// waited for the last rank summed over all (s).
    pub fn ddpspawn_context_rank_arrivals(
        context: *const ddpspawn_context,
        rank: i32,
        out_arrived_last: *mut i64,
        out_late_seconds: *mut f64,
        out_waited_seconds: *mut f64,
    ) -> ddpspawn_status;

    // Collectives.
    pub fn ddpspawn_barrier(context: *mut ddpspawn_context, name: *const c_char)
        -> ddpspawn_status;
    pub fn ddpspawn_broadcast(
        context: *mut ddpspawn_context,
        data: *mut c_void,
        count: usize,
        dtype: i32,
        src: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_broadcast_bytes(
        context: *mut ddpspawn_context,
        data: *const c_void,
        size: usize,
        src: i32,
        out_data: *mut *mut c_void,
        out_size: *mut usize,
    ) -> ddpspawn_status;
    pub fn ddpspawn_all_reduce(
        context: *mut ddpspawn_context,
        data: *mut c_void,
        count: usize,
        dtype: i32,
        op: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_reduce(
        context: *mut ddpspawn_context,
        data: *mut c_void,
        count: usize,
        dtype: i32,
        op: i32,
        dst: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_all_gather(
        context: *mut ddpspawn_context,
        data: *const c_void,
        count: usize,
        dtype: i32,
        out: *mut c_void,
    ) -> ddpspawn_status;
    /// Added in version node `DDPSPAWN_1.1`.
    pub fn ddpspawn_reduce_scatter(
        context: *mut ddpspawn_context,
        input: *const c_void,
        output: *mut c_void,
        count: usize,
        dtype: i32,
        op: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_all_gather_bytes(
        context: *mut ddpspawn_context,
        data: *const c_void,
        size: usize,
        out_data: *mut *mut c_void,
        out_sizes: *mut usize,
    ) -> ddpspawn_status;

    // Gradient reducer.
    pub fn ddpspawn_reducer_options_init(options: *mut ddpspawn_reducer_options);
    /// As `ddpspawn_launch_options_init_sized`.
    pub fn ddpspawn_reducer_options_init_sized(
        options: *mut ddpspawn_reducer_options,
        struct_size: u32,
    ) -> ddpspawn_status;
    /// `buffers[i]` holds `counts[i]` elements of `dtypes[i]`; the buffers
    /// stay the caller's and must outlive the reducer.
    pub fn ddpspawn_reducer_create(
        context: *mut ddpspawn_context,
        buffers: *const *mut c_void,
        counts: *const usize,
        dtypes: *const i32,
        num_buffers: usize,
        options: *const ddpspawn_reducer_options,
        out_reducer: *mut *mut ddpspawn_reducer,
    ) -> ddpspawn_status;
    pub fn ddpspawn_reducer_destroy(reducer: *mut ddpspawn_reducer);
    pub fn ddpspawn_reducer_mark_ready(
        reducer: *mut ddpspawn_reducer,
        index: usize,
    ) -> ddpspawn_status;
    pub fn ddpspawn_reducer_finalize(reducer: *mut ddpspawn_reducer) -> ddpspawn_status;
    pub fn ddpspawn_reducer_set_sync(
        reducer: *mut ddpspawn_reducer,
        enabled: i32,
    ) -> ddpspawn_status;
    /// `*out_written` = 1 when the last finalize wrote the mean into buffer
    /// `index`; 0 under no_sync and, with find_unused_parameters, when no rank
    /// marked it (left as it was).
    pub fn ddpspawn_reducer_written(
        reducer: *const ddpspawn_reducer,
        index: usize,
        out_written: *mut i32,
    ) -> ddpspawn_status;
    /// Number of buckets; -1 for NULL.
    pub fn ddpspawn_reducer_bucket_count(reducer: *const ddpspawn_reducer) -> i32;
    /// With the `"powersgd"` hook: the elements the last compressed iteration
    /// sent and the gradient elements they stood for; both 0 before
    /// `powersgd_start_iteration` and with the other hooks.
    pub fn ddpspawn_reducer_compression(
        reducer: *const ddpspawn_reducer,
        out_sent: *mut i64,
        out_dense: *mut i64,
    ) -> ddpspawn_status;

    // Sharding a dataset.
    /// Rank 0 appends a row per value to `dir`/metrics.csv (the Trainer's
    /// CSV logger's file); the other ranks write nothing. Added in version
    /// node `DDPSPAWN_1.3`.
    pub fn ddpspawn_log_metrics(
        context: *mut ddpspawn_context,
        dir: *const c_char,
        epoch: i64,
        step: i64,
        names: *const *const c_char,
        values: *const f64,
        count: usize,
    ) -> ddpspawn_status;

    /// torch's `DistributedSampler` indices of `rank` in `epoch`; `out_indices`
    /// NULL (capacity 0) asks for the count only. Added in version node
    /// `DDPSPAWN_1.2`.
    pub fn ddpspawn_distributed_sampler_indices(
        dataset_size: i64,
        num_replicas: i32,
        rank: i32,
        shuffle: i32,
        seed: u64,
        drop_last: i32,
        epoch: i64,
        out_indices: *mut i64,
        capacity: usize,
        out_count: *mut usize,
    ) -> ddpspawn_status;

    // Training runs.
    /// Runs `command` (`"fit"`, `"validate"`, `"test"` or `"predict"`) with
    /// `options`, a NULL-terminated array of `"key=value"` strings (the CLI's
    /// flags); the ranks are forked from the calling process. Free the
    /// result with `ddpspawn_run_result_destroy`.
    pub fn ddpspawn_run(
        command: *const c_char,
        options: *const *const c_char,
        out_result: *mut *mut ddpspawn_run_result,
    ) -> ddpspawn_status;
    pub fn ddpspawn_run_result_destroy(result: *mut ddpspawn_run_result);
    /// The value for `key`, or NULL; owned by the result.
    pub fn ddpspawn_run_result_get(
        result: *const ddpspawn_run_result,
        key: *const c_char,
    ) -> *const c_char;
    /// Every pair as `"key=value"` lines; owned by the result; `""` for NULL.
    pub fn ddpspawn_run_result_text(result: *const ddpspawn_run_result) -> *const c_char;
    /// The number of pairs, in the run's order; 0 for NULL.
    pub fn ddpspawn_run_result_count(result: *const ddpspawn_run_result) -> usize;
    /// Pair `index`'s key, or NULL when `index >= count`; owned by the result.
    pub fn ddpspawn_run_result_key(
        result: *const ddpspawn_run_result,
        index: usize,
    ) -> *const c_char;
    /// Pair `index`'s value, or NULL when `index >= count`; owned by the result.
    pub fn ddpspawn_run_result_value(
        result: *const ddpspawn_run_result,
        index: usize,
    ) -> *const c_char;
    /// The rank whose failure ended this thread's last `ddpspawn_run`; -1 when none failed.
    pub fn ddpspawn_run_failed_rank() -> i32;
    /// Ranks started by this thread's last `ddpspawn_run` (0 when none was).
    pub fn ddpspawn_run_nprocs() -> i32;
    pub fn ddpspawn_run_rank_report(
        rank: i32,
        out_report: *mut ddpspawn_rank_report,
    ) -> ddpspawn_status;
    pub fn ddpspawn_run_rank_error(rank: i32, out_text: *mut *const c_char) -> ddpspawn_status;

}
