//! Raw declarations of ddpspawn's C ABI, one for one with
//! `capi/include/ddpspawn/ddpspawn.h` (ABI version 1).
//!
//! Everything here is `unsafe` and follows the header's conventions: fallible
//! functions return a [`ddpspawn_status`] (`DDPSPAWN_OK == 0`) and leave the
//! message in [`ddpspawn_last_error`]; option structs carry their size as the
//! first field. Get the library's defaults for an option struct from its
//! `*_init_sized` function with `size_of::<T>()` as the size (what the safe
//! crate does): the library writes exactly the fields this crate knows about,
//! so a newer library with a longer struct never writes past the end of ours,
//! and the defaults are the library's own. The plain `*_init` functions write
//! a whole struct of the library's own size: not into a Rust struct. The
//! `*_INIT` constants (and `Default`) mirror the header's macros, i.e. the
//! defaults of the header this crate was written against.
//!
//! The safe API lives in the `ddpspawn` crate. The functions of
//! `ddpspawn/ddpspawn_dlpack.h`, with the DLPack structs they take, are in
//! the `dlpack` module (re-exported here; checked by `tests/dlpack.rs`).

// The declarations keep the header's C names (`ddpspawn_job`,
// `ddpspawn_status`, ...), one for one, so that the header's documentation
// applies as it is.
#![allow(non_camel_case_types)]

use std::marker::{PhantomData, PhantomPinned};
use std::mem::size_of;
use std::os::raw::{c_char, c_double, c_int, c_void};
use std::ptr;

mod dlpack;
pub use dlpack::*;

/// The ABI major version this crate declares; the library's SONAME is
/// `libddpspawn.so.1`.
pub const DDPSPAWN_ABI_VERSION: i32 = 1;

// ---------------------------------------------------------------------------
// Status codes and errors
// ---------------------------------------------------------------------------

/// Return type of every fallible function.
pub type ddpspawn_status = i32;

pub const DDPSPAWN_OK: ddpspawn_status = 0;
/// A NULL pointer, a wrong size, an unknown name, an out-of-range value.
pub const DDPSPAWN_ERR_INVALID_ARGUMENT: ddpspawn_status = 1;
/// A worker failed: `ddpspawn_last_error()` names the rank and the cause.
pub const DDPSPAWN_ERR_WORKER_FAILED: ddpspawn_status = 2;
/// The job, or a collective, ran past its timeout.
pub const DDPSPAWN_ERR_TIMEOUT: ddpspawn_status = 3;
/// The launcher received SIGINT or SIGTERM and stopped the workers.
pub const DDPSPAWN_ERR_INTERRUPTED: ddpspawn_status = 4;
/// Valid but not available in this build, or outside a ddpspawn worker.
pub const DDPSPAWN_ERR_UNAVAILABLE: ddpspawn_status = 5;
/// A call in the wrong state.
pub const DDPSPAWN_ERR_FAILED_PRECONDITION: ddpspawn_status = 6;
/// A system call or a collective failed.
pub const DDPSPAWN_ERR_INTERNAL: ddpspawn_status = 7;

// ---------------------------------------------------------------------------
// Launcher types
// ---------------------------------------------------------------------------

/// A fork-mode worker: runs in the forked child; its return value is the
/// child's exit code (0 = success). `rank` is the child's global rank.
pub type ddpspawn_worker_fn =
    Option<unsafe extern "C" fn(rank: i32, user_data: *mut c_void) -> c_int>;

/// Called around each fork in fork mode (in the launching thread).
pub type ddpspawn_fork_hook = Option<unsafe extern "C" fn()>;

/// Options for `ddpspawn_job_create`; start from
/// [`ddpspawn_launch_options_init_sized`] (or
/// [`DDPSPAWN_LAUNCH_OPTIONS_INIT`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ddpspawn_launch_options {
    /// `size_of::<ddpspawn_launch_options>()`.
    pub struct_size: u32,
    /// Number of worker processes, >= 1.
    pub nprocs: i32,
    /// `"spawn"` (default when NULL) or `"fork"`.
    pub start_method: *const c_char,
    /// spawn: program (searched on PATH) and arguments, NULL-terminated.
    pub argv: *const *const c_char,
    /// Extra `"NAME=value"` entries for every rank, NULL-terminated; may be NULL.
    pub env: *const *const c_char,
    /// fork: the function each child runs.
    pub worker_fn: ddpspawn_worker_fn,
    /// Passed to `worker_fn`.
    pub user_data: *mut c_void,
    /// fork: in the parent, before each fork.
    pub before_fork: ddpspawn_fork_hook,
    /// fork: in the parent, after each fork.
    pub after_fork_parent: ddpspawn_fork_hook,
    /// fork: in the child, first thing.
    pub after_fork_child: ddpspawn_fork_hook,
    /// Whole-job limit in seconds; 0 = none.
    pub timeout_s: c_double,
    /// Seconds between SIGTERM and SIGKILL after the first failure.
    pub grace_period_s: c_double,
    /// MASTER_ADDR given to the workers; NULL = 127.0.0.1.
    pub master_addr: *const c_char,
    /// MASTER_PORT given to the workers; 0 = a free port.
    pub master_port: i32,
    /// Where the first release's struct ended (its padding); ignored.
    pub unused0: i32,
    /// Nodes of the job, one launcher each; node 0's serves the rendezvous
    /// at `master_addr:master_port` (both required when > 1). Default 1.
    pub nnodes: i32,
    /// This launcher's node: its ranks are `node_rank * nprocs ..`. Default 0.
    pub node_rank: i32,
    /// torchrun's `--max-restarts`: `ddpspawn_job_wait` starts every rank
    /// again after a rank fails, up to this many times. Default 0.
    pub max_restarts: i32,
    /// Padding; ignored.
    pub unused1: i32,
}

/// The header's `DDPSPAWN_LAUNCH_OPTIONS_INIT`.
pub const DDPSPAWN_LAUNCH_OPTIONS_INIT: ddpspawn_launch_options = ddpspawn_launch_options {
    struct_size: size_of::<ddpspawn_launch_options>() as u32,
    nprocs: 1,
    start_method: ptr::null(),
    argv: ptr::null(),
    env: ptr::null(),
    worker_fn: None,
    user_data: ptr::null_mut(),
    before_fork: None,
    after_fork_parent: None,
    after_fork_child: None,
    timeout_s: 0.0,
    grace_period_s: 5.0,
    master_addr: ptr::null(),
    master_port: 0,
    unused0: 0,
    nnodes: 1,
    node_rank: 0,
    max_restarts: 0,
    unused1: 0,
};

impl Default for ddpspawn_launch_options {
    fn default() -> Self {
        DDPSPAWN_LAUNCH_OPTIONS_INIT
    }
}

/// Opaque job handle.
#[repr(C)]
pub struct ddpspawn_job {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

pub const DDPSPAWN_RANK_NOT_STARTED: i32 = 0;
pub const DDPSPAWN_RANK_RUNNING: i32 = 1;
/// `exit_code` is set.
pub const DDPSPAWN_RANK_EXITED: i32 = 2;
/// `signal` is set.
pub const DDPSPAWN_RANK_SIGNALED: i32 = 3;

/// How a rank ended; start from [`ddpspawn_rank_report_init_sized`] (or
/// [`DDPSPAWN_RANK_REPORT_INIT`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ddpspawn_rank_report {
    /// `size_of::<ddpspawn_rank_report>()`.
    pub struct_size: u32,
    /// One of `DDPSPAWN_RANK_*`.
    pub state: i32,
    pub exit_code: i32,
    pub signal: i32,
    pub pid: i64,
    /// Non-zero when the launcher stopped this rank.
    pub stopped_by_launcher: i32,
}

/// The header's `DDPSPAWN_RANK_REPORT_INIT`.
pub const DDPSPAWN_RANK_REPORT_INIT: ddpspawn_rank_report = ddpspawn_rank_report {
    struct_size: size_of::<ddpspawn_rank_report>() as u32,
    state: 0,
    exit_code: 0,
    signal: 0,
    pid: 0,
    stopped_by_launcher: 0,
};

impl Default for ddpspawn_rank_report {
    fn default() -> Self {
        DDPSPAWN_RANK_REPORT_INIT
    }
}

// ---------------------------------------------------------------------------
// Worker-side types
// ---------------------------------------------------------------------------

/// Opaque process-group handle.
#[repr(C)]
pub struct ddpspawn_context {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// Options for `ddpspawn_context_create`; start from
/// [`ddpspawn_context_options_init_sized`] (or
/// [`DDPSPAWN_CONTEXT_OPTIONS_INIT`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ddpspawn_context_options {
    /// `size_of::<ddpspawn_context_options>()`.
    pub struct_size: u32,
    /// `"gloo"` (default when NULL) or `"nccl"`.
    pub backend: *const c_char,
    /// Seconds for joining the group and for each collective; 0 = 1800.
    pub timeout_s: c_double,
}

/// The header's `DDPSPAWN_CONTEXT_OPTIONS_INIT`.
pub const DDPSPAWN_CONTEXT_OPTIONS_INIT: ddpspawn_context_options = ddpspawn_context_options {
    struct_size: size_of::<ddpspawn_context_options>() as u32,
    backend: ptr::null(),
    timeout_s: 0.0,
};

impl Default for ddpspawn_context_options {
    fn default() -> Self {
        DDPSPAWN_CONTEXT_OPTIONS_INIT
    }
}

pub const DDPSPAWN_FLOAT32: i32 = 0;
pub const DDPSPAWN_FLOAT64: i32 = 1;
pub const DDPSPAWN_INT32: i32 = 2;
pub const DDPSPAWN_INT64: i32 = 3;

pub const DDPSPAWN_SUM: i32 = 0;
/// Sum / world size; integers truncate toward 0.
pub const DDPSPAWN_MEAN: i32 = 1;
pub const DDPSPAWN_MIN: i32 = 2;
pub const DDPSPAWN_MAX: i32 = 3;
pub const DDPSPAWN_PRODUCT: i32 = 4;

// ---------------------------------------------------------------------------
// Gradient reducer types
// ---------------------------------------------------------------------------

/// Opaque gradient-reducer handle.
#[repr(C)]
pub struct ddpspawn_reducer {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// One bucket, as a C communication hook sees it: `count` elements of
/// `dtype` back to back at `data` (the reducer's memory).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ddpspawn_bucket {
    /// `size_of::<ddpspawn_bucket>()`.
    pub struct_size: u32,
    /// Buckets start in index order on every rank.
    pub index: i32,
    /// The reducer's number of buckets.
    pub bucket_count: i32,
    /// `DDPSPAWN_FLOAT32` ...
    pub dtype: i32,
    /// `count` elements of `dtype`.
    pub data: *mut c_void,
    /// Elements at `data`.
    pub count: usize,
}

/// A communication hook as C function pointers (the header's comment says
/// what each must do); the reducer copies it and calls `release(user_data)`
/// once, when it is destroyed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ddpspawn_comm_hook {
    /// `size_of::<ddpspawn_comm_hook>()`.
    pub struct_size: u32,
    /// Passed to every call.
    pub user_data: *mut c_void,
    /// Begins averaging a bucket; may set `*out_work` for `wait`.
    pub start: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            context: *mut ddpspawn_context,
            bucket: *const ddpspawn_bucket,
            out_work: *mut *mut c_void,
        ) -> ddpspawn_status,
    >,
    /// Finishes what `start` began; NULL: nothing to finish.
    pub wait: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            context: *mut ddpspawn_context,
            work: *mut c_void,
        ) -> ddpspawn_status,
    >,
    /// Called once when the reducer is destroyed; NULL: nothing.
    pub release: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// Options for `ddpspawn_reducer_create`; start from
/// [`ddpspawn_reducer_options_init_sized`] (or
/// [`DDPSPAWN_REDUCER_OPTIONS_INIT`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ddpspawn_reducer_options {
    /// `size_of::<ddpspawn_reducer_options>()`.
    pub struct_size: u32,
    /// Size cap of a bucket in MiB; default 25.
    pub bucket_cap_mb: c_double,
    /// Size cap of the first bucket in MiB; default 1.
    pub first_bucket_cap_mb: c_double,
    /// `"allreduce"` (default when NULL), `"fp16"`, `"bf16"`, `"powersgd"` or
    /// `"batched_powersgd"`.
    pub comm_hook: *const c_char,
    /// PowerSGD's matrix approximation rank; default 1.
    pub powersgd_rank: i32,
    /// PowerSGD runs plain all-reduce before this iteration; default 10.
    pub powersgd_start_iteration: i32,
    /// Non-zero: buffers no rank marked ready in an iteration stay untouched.
    pub find_unused_parameters: i32,
    /// Not NULL: this hook averages every bucket (`comm_hook` NULL or
    /// `"allreduce"`); copied at creation.
    pub custom_comm_hook: *const ddpspawn_comm_hook,
}

/// The header's `DDPSPAWN_REDUCER_OPTIONS_INIT`.
pub const DDPSPAWN_REDUCER_OPTIONS_INIT: ddpspawn_reducer_options = ddpspawn_reducer_options {
    struct_size: size_of::<ddpspawn_reducer_options>() as u32,
    bucket_cap_mb: 25.0,
    first_bucket_cap_mb: 1.0,
    comm_hook: ptr::null(),
    powersgd_rank: 1,
    powersgd_start_iteration: 10,
    find_unused_parameters: 0,
    custom_comm_hook: ptr::null(),
};

impl Default for ddpspawn_reducer_options {
    fn default() -> Self {
        DDPSPAWN_REDUCER_OPTIONS_INIT
    }
}

// ---------------------------------------------------------------------------
// Training run types
// ---------------------------------------------------------------------------

/// Opaque result of `ddpspawn_run`: rank 0's `key=value` pairs.
#[repr(C)]
pub struct ddpspawn_run_result {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

// ---------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------

extern "C" {
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::ffi::CStr;

    /// The library's own `*_init` functions agree with the constants (same
    /// struct size and defaults): the library and this crate describe the
    /// same ABI. The library fills a generous buffer, so a library with a
    /// longer struct fails the size check instead of writing past ours.
    #[test]
    fn library_init_functions_agree() {
        let mut buf = [0u64; 64];
        unsafe {
            ddpspawn_launch_options_init(buf.as_mut_ptr().cast());
            let o = &*(buf.as_ptr() as *const ddpspawn_launch_options);
            assert_eq!(o.struct_size as usize, size_of::<ddpspawn_launch_options>());
            assert_eq!(o.nprocs, 1);
            assert_eq!(o.grace_period_s, 5.0);
            assert_eq!(o.timeout_s, 0.0);
            assert_eq!(o.master_port, 0);
            assert_eq!((o.nnodes, o.node_rank), (1, 0));
            assert!(o.start_method.is_null() && o.worker_fn.is_none());
        }
        let mut buf = [0u64; 64];
        unsafe {
            ddpspawn_context_options_init(buf.as_mut_ptr().cast());
            let c = &*(buf.as_ptr() as *const ddpspawn_context_options);
            assert_eq!(
                c.struct_size as usize,
                size_of::<ddpspawn_context_options>()
            );
            assert!(c.backend.is_null());
            assert_eq!(c.timeout_s, 0.0);
        }
        let mut buf = [0u64; 64];
        unsafe {
            ddpspawn_reducer_options_init(buf.as_mut_ptr().cast());
            let r = &*(buf.as_ptr() as *const ddpspawn_reducer_options);
            assert_eq!(
                r.struct_size as usize,
                size_of::<ddpspawn_reducer_options>()
            );
            assert_eq!((r.bucket_cap_mb, r.first_bucket_cap_mb), (25.0, 1.0));
            assert!(r.comm_hook.is_null());
            assert_eq!(
                (
                    r.powersgd_rank,
                    r.powersgd_start_iteration,
                    r.find_unused_parameters
                ),
                (1, 10, 0)
            );
        }
    }

    /// `T` filled with 0xab bytes, then given to `init` with its size.
    unsafe fn init_sized<T>(init: unsafe extern "C" fn(*mut T, u32) -> ddpspawn_status) -> T {
        let mut value = std::mem::MaybeUninit::<T>::uninit();
        ptr::write_bytes(value.as_mut_ptr(), 0xab, 1);
        assert_eq!(init(value.as_mut_ptr(), size_of::<T>() as u32), DDPSPAWN_OK);
        value.assume_init()
    }

    /// Each `*_init_sized` function writes every field of this crate's
    /// struct, with the header's `*_INIT` values; a size that is no released
    /// version's, or a NULL struct, is refused.
    #[test]
    fn library_init_sized_functions_fill_the_whole_struct() {
        unsafe {
            let o = init_sized(ddpspawn_launch_options_init_sized);
            assert_eq!(
                format!("{o:?}"),
                format!("{DDPSPAWN_LAUNCH_OPTIONS_INIT:?}")
            );
            let r = init_sized(ddpspawn_rank_report_init_sized);
            assert_eq!(r, DDPSPAWN_RANK_REPORT_INIT);
            let c = init_sized(ddpspawn_context_options_init_sized);
            assert_eq!(
                format!("{c:?}"),
                format!("{DDPSPAWN_CONTEXT_OPTIONS_INIT:?}")
            );
            let r = init_sized(ddpspawn_reducer_options_init_sized);
            assert_eq!(
                format!("{r:?}"),
                format!("{DDPSPAWN_REDUCER_OPTIONS_INIT:?}")
            );

            let mut options = DDPSPAWN_REDUCER_OPTIONS_INIT;
            let short = size_of::<ddpspawn_reducer_options>() as u32 - 4;
            assert_eq!(
                ddpspawn_reducer_options_init_sized(&mut options, short),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert!(!CStr::from_ptr(ddpspawn_last_error()).to_bytes().is_empty());
            assert_eq!(
                ddpspawn_launch_options_init_sized(
                    ptr::null_mut(),
                    size_of::<ddpspawn_launch_options>() as u32
                ),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
        }
    }

    #[test]
    fn links_and_reports_abi_version() {
        unsafe {
            assert_eq!(ddpspawn_abi_version(), DDPSPAWN_ABI_VERSION);
            let v = CStr::from_ptr(ddpspawn_version());
            assert!(!v.to_bytes().is_empty());
            let info = CStr::from_ptr(ddpspawn_build_info()).to_str().unwrap();
            assert!(info.contains("\ntorch=2."), "{info}");
            assert!(!ddpspawn_last_error().is_null());
            ddpspawn_free(ptr::null_mut());
            ddpspawn_job_destroy(ptr::null_mut());
            ddpspawn_context_destroy(ptr::null_mut());
            ddpspawn_reducer_destroy(ptr::null_mut());
            ddpspawn_run_result_destroy(ptr::null_mut());
        }
    }

    #[test]
    fn null_arguments_are_invalid_argument() {
        unsafe {
            let mut job: *mut ddpspawn_job = ptr::null_mut();
            assert_eq!(
                ddpspawn_job_create(ptr::null(), &mut job),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert!(job.is_null());
            let msg = CStr::from_ptr(ddpspawn_last_error());
            assert!(!msg.to_bytes().is_empty());
            assert_eq!(ddpspawn_context_rank(ptr::null()), -1);
            assert_eq!(ddpspawn_context_world_size(ptr::null()), -1);
            assert_eq!(
                CStr::from_ptr(ddpspawn_context_environment(ptr::null())).to_bytes(),
                b""
            );

            let mut reducer: *mut ddpspawn_reducer = ptr::null_mut();
            let mut data = [0.0f32; 2];
            let buffers = [data.as_mut_ptr() as *mut c_void];
            let counts = [data.len()];
            let dtypes = [DDPSPAWN_FLOAT32];
            assert_eq!(
                ddpspawn_reducer_create(
                    ptr::null_mut(),
                    buffers.as_ptr(),
                    counts.as_ptr(),
                    dtypes.as_ptr(),
                    1,
                    ptr::null(),
                    &mut reducer
                ),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert!(reducer.is_null());
            assert_eq!(
                ddpspawn_reducer_mark_ready(ptr::null_mut(), 0),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert_eq!(
                ddpspawn_reducer_finalize(ptr::null_mut()),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert_eq!(
                ddpspawn_reducer_set_sync(ptr::null_mut(), 0),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            let mut written = 0i32;
            assert_eq!(
                ddpspawn_reducer_written(ptr::null(), 0, &mut written),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert_eq!(ddpspawn_reducer_bucket_count(ptr::null()), -1);
        }
    }

    /// The training-run functions' NULL handling; nothing is started (a
    /// run that got as far as forking would fork libtest's process).
    #[test]
    fn run_null_arguments() {
        unsafe {
            let mut result: *mut ddpspawn_run_result = ptr::null_mut();
            let options: [*const c_char; 1] = [ptr::null()];
            assert_eq!(
                ddpspawn_run(ptr::null(), options.as_ptr(), &mut result),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert!(result.is_null());
            assert_eq!(
                ddpspawn_run(b"fit\0".as_ptr().cast(), options.as_ptr(), ptr::null_mut()),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            // An unknown command is refused before any option is looked at.
            assert_eq!(
                ddpspawn_run(b"train\0".as_ptr().cast(), options.as_ptr(), &mut result),
                DDPSPAWN_ERR_INVALID_ARGUMENT
            );
            assert!(result.is_null());
            let msg = CStr::from_ptr(ddpspawn_last_error()).to_string_lossy();
            assert!(msg.contains("train"), "{msg}");
            assert!(ddpspawn_run_result_get(ptr::null(), b"epoch\0".as_ptr().cast()).is_null());
            assert_eq!(
                CStr::from_ptr(ddpspawn_run_result_text(ptr::null())).to_bytes(),
                b""
            );
        }
    }
}
