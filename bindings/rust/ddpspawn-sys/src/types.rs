//! The C ABI's types and constants, as `ddpspawn/ddpspawn.h` declares them:
//! status codes, the launcher's options and rank report, the worker side's
//! context options, element types and reduce ops, the gradient reducer's
//! structs and the training run's result handle (re-exported at the crate
//! root).

use std::marker::{PhantomData, PhantomPinned};
use std::mem::size_of;
use std::os::raw::{c_char, c_double, c_int, c_void};
use std::ptr;

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
/// [`ddpspawn_launch_options_init_sized`](crate::ddpspawn_launch_options_init_sized) (or
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

/// How a rank ended; start from
/// [`ddpspawn_rank_report_init_sized`](crate::ddpspawn_rank_report_init_sized)
/// (or [`DDPSPAWN_RANK_REPORT_INIT`]).
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
/// [`ddpspawn_context_options_init_sized`](crate::ddpspawn_context_options_init_sized) (or
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
/// [`ddpspawn_reducer_options_init_sized`](crate::ddpspawn_reducer_options_init_sized) (or
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
