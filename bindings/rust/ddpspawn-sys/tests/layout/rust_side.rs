//! The Rust side of `tests/layout.rs`: the facts about this crate's
//! declarations, keyed like the C program's output, and the names its source
//! declares.

use ddpspawn_sys::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::mem::{align_of, size_of, MaybeUninit};
use std::os::raw::{c_int, c_void};
use std::ptr;

/// How the C program classifies a type: `int` (signed integer), `uint`
/// (unsigned integer), `float` or `ptr` (data or function pointer).
trait Kind {
    const KIND: &'static str;
}

macro_rules! kind {
    ($kind:literal: $($ty:ty),+) => {
        $(impl Kind for $ty {
            const KIND: &'static str = $kind;
        })+
    };
}

kind!("int": i8, i16, i32, i64, isize);
kind!("uint": u8, u16, u32, u64, usize);
kind!("float": f32, f64);
// The header's function-pointer typedefs (nullable, hence `Option`).
kind!("ptr": Option<unsafe extern "C" fn()>, Option<unsafe extern "C" fn(i32, *mut c_void) -> c_int>);
// ddpspawn_comm_hook's callbacks.
kind!("ptr":
    Option<unsafe extern "C" fn(*mut c_void, *mut ddpspawn_context, *const ddpspawn_bucket,
                                *mut *mut c_void) -> ddpspawn_status>,
    Option<unsafe extern "C" fn(*mut c_void, *mut ddpspawn_context, *mut c_void)
                                -> ddpspawn_status>,
    Option<unsafe extern "C" fn(*mut c_void)>);

impl<T> Kind for *const T {
    const KIND: &'static str = "ptr";
}

impl<T> Kind for *mut T {
    const KIND: &'static str = "ptr";
}

fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

fn pointee_kind<T: Kind>(_: *const T) -> &'static str {
    T::KIND
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The facts about the Rust declarations, keyed like the C program's output
/// (`"struct NAME"`, `"field NAME.FIELD"`, ...), and the names of the
/// `*_INIT` constants that were compared.
pub(crate) struct RustSide {
    pub(crate) facts: BTreeMap<String, String>,
    pub(crate) init_consts: Vec<&'static str>,
}

/// A struct with a body: its size and alignment, and each field's offset,
/// size and kind (alone for a struct without a `*_INIT` macro, which the
/// library or the caller fills whole). The field list must name every field
/// of the Rust struct.
macro_rules! layout_struct {
    ($side:ident, $ty:ident { $($field:ident),+ $(,)? }) => {{
        let _ = |v: $ty| {
            let $ty { $($field: _),+ } = v;
        };
        let name = stringify!($ty);
        $side.facts.insert(
            format!("struct {name}"),
            format!("size={} align={}", size_of::<$ty>(), align_of::<$ty>()),
        );
        let value = MaybeUninit::<$ty>::uninit();
        let base = value.as_ptr();
        $(
            // SAFETY: addr_of! only computes the address of a field inside
            // `value`; nothing is read.
            let field = unsafe { ptr::addr_of!((*base).$field) };
            $side.facts.insert(
                format!("field {name}.{}", stringify!($field)),
                format!(
                    "offset={} size={} kind={}",
                    field as usize - base as usize,
                    pointee_size(field),
                    pointee_kind(field),
                ),
            );
        )+
    }};
}

/// A struct with a body and its `*_INIT` constant: `layout_struct!`'s facts,
/// and the bytes of each field of the constant.
macro_rules! full_struct {
    ($side:ident, $ty:ident { $($field:ident),+ $(,)? }, $init:ident) => {{
        layout_struct!($side, $ty { $($field),+ });
        let name = stringify!($ty);
        let init: $ty = $init;
        $(
            let field = ptr::addr_of!(init.$field);
            // SAFETY: the bytes of one initialized field of `init` (no
            // padding is read).
            let bytes =
                unsafe { std::slice::from_raw_parts(field.cast::<u8>(), pointee_size(field)) };
            $side
                .facts
                .insert(format!("init {name}.{}", stringify!($field)), hex(bytes));
        )+
        $side.init_consts.push(stringify!($init));
    }};
}

/// An opaque handle: the header declares it without a body, Rust as a
/// zero-sized type.
macro_rules! opaque_struct {
    ($side:ident, $($ty:ident),+ $(,)?) => {
        $($side.facts.insert(
            format!("opaque {}", stringify!($ty)),
            match size_of::<$ty>() {
                0 => "no body".to_string(),
                n => format!("size={n}"),
            },
        );)+
    };
}

macro_rules! typedefs {
    ($side:ident, $($ty:ident),+ $(,)?) => {
        $($side.facts.insert(
            format!("typedef {}", stringify!($ty)),
            format!("size={} kind={}", size_of::<$ty>(), <$ty as Kind>::KIND),
        );)+
    };
}

macro_rules! defines {
    ($side:ident, $($name:ident),+ $(,)?) => {
        $($side.facts.insert(format!("define {}", stringify!($name)), i64::from($name).to_string());)+
    };
}

pub(crate) fn rust_side() -> RustSide {
    let mut side = RustSide {
        facts: BTreeMap::new(),
        init_consts: Vec::new(),
    };

    full_struct!(
        side,
        ddpspawn_launch_options {
            struct_size,
            nprocs,
            start_method,
            argv,
            env,
            worker_fn,
            user_data,
            before_fork,
            after_fork_parent,
            after_fork_child,
            timeout_s,
            grace_period_s,
            master_addr,
            master_port,
            unused0,
            nnodes,
            node_rank,
            max_restarts,
            unused1,
        },
        DDPSPAWN_LAUNCH_OPTIONS_INIT
    );
    full_struct!(
        side,
        ddpspawn_rank_report {
            struct_size,
            state,
            exit_code,
            signal,
            pid,
            stopped_by_launcher,
        },
        DDPSPAWN_RANK_REPORT_INIT
    );
    full_struct!(
        side,
        ddpspawn_context_options {
            struct_size,
            backend,
            timeout_s,
        },
        DDPSPAWN_CONTEXT_OPTIONS_INIT
    );
    full_struct!(
        side,
        ddpspawn_reducer_options {
            struct_size,
            bucket_cap_mb,
            first_bucket_cap_mb,
            comm_hook,
            powersgd_rank,
            powersgd_start_iteration,
            find_unused_parameters,
            custom_comm_hook,
        },
        DDPSPAWN_REDUCER_OPTIONS_INIT
    );
    layout_struct!(
        side,
        ddpspawn_bucket {
            struct_size,
            index,
            bucket_count,
            dtype,
            data,
            count,
        }
    );
    layout_struct!(
        side,
        ddpspawn_comm_hook {
            struct_size,
            user_data,
            start,
            wait,
            release,
        }
    );
    opaque_struct!(
        side,
        ddpspawn_job,
        ddpspawn_context,
        ddpspawn_reducer,
        ddpspawn_run_result,
    );
    typedefs!(
        side,
        ddpspawn_status,
        ddpspawn_worker_fn,
        ddpspawn_fork_hook
    );
    defines!(
        side,
        DDPSPAWN_ABI_VERSION,
        DDPSPAWN_OK,
        DDPSPAWN_ERR_INVALID_ARGUMENT,
        DDPSPAWN_ERR_WORKER_FAILED,
        DDPSPAWN_ERR_TIMEOUT,
        DDPSPAWN_ERR_INTERRUPTED,
        DDPSPAWN_ERR_UNAVAILABLE,
        DDPSPAWN_ERR_FAILED_PRECONDITION,
        DDPSPAWN_ERR_INTERNAL,
        DDPSPAWN_RANK_NOT_STARTED,
        DDPSPAWN_RANK_RUNNING,
        DDPSPAWN_RANK_EXITED,
        DDPSPAWN_RANK_SIGNALED,
        DDPSPAWN_FLOAT32,
        DDPSPAWN_FLOAT64,
        DDPSPAWN_INT32,
        DDPSPAWN_INT64,
        DDPSPAWN_SUM,
        DDPSPAWN_MEAN,
        DDPSPAWN_MIN,
        DDPSPAWN_MAX,
        DDPSPAWN_PRODUCT,
    );
    side
}

/// The crate's source files that hold the declarations of
/// `ddpspawn/ddpspawn.h` (`src/dlpack.rs` has its own test, `tests/dlpack.rs`).
const SOURCES: [&str; 3] = [
    include_str!("../../src/lib.rs"),
    include_str!("../../src/types.rs"),
    include_str!("../../src/functions.rs"),
];

/// Names declared in this crate's source (`SOURCES`): `#[repr(C)]` structs,
/// `pub type`s and `pub const`s (a plain text scan; the crate's style is one
/// item per line).
pub(crate) struct SourceNames {
    pub(crate) repr_c_structs: BTreeSet<String>,
    pub(crate) types: BTreeSet<String>,
    pub(crate) consts: BTreeSet<String>,
    /// `pub fn`s: the declarations in the `extern "C"` block.
    pub(crate) functions: BTreeSet<String>,
}

pub(crate) fn source_names() -> SourceNames {
    let ident = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = SourceNames {
        repr_c_structs: BTreeSet::new(),
        types: BTreeSet::new(),
        consts: BTreeSet::new(),
        functions: BTreeSet::new(),
    };
    let mut repr_c = false;
    for line in SOURCES.iter().flat_map(|s| s.lines()).map(str::trim) {
        if line.starts_with("#[repr(C") {
            repr_c = true;
        } else if let Some(rest) = line.strip_prefix("pub struct ") {
            if repr_c {
                names.repr_c_structs.insert(ident(rest));
            }
            repr_c = false;
        } else if let Some(rest) = line.strip_prefix("pub type ") {
            names.types.insert(ident(rest));
        } else if let Some(rest) = line.strip_prefix("pub const ") {
            names.consts.insert(ident(rest));
        } else if let Some(rest) = line.strip_prefix("pub fn ") {
            names.functions.insert(ident(rest));
        } else if !line.starts_with("#[") && !line.starts_with("//") {
            repr_c = false;
        }
    }
    names
}
