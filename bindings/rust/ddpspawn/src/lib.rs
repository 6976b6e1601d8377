//! Safe Rust API for ddpspawn: start N worker processes, join them into a
//! c10d process group (Gloo on CPU, NCCL on CUDA), run collectives, and hand a
//! result from rank 0 back to the launching process.
//!
//! Two sides:
//!
//! * The launcher: [`Launcher`] starts the ranks (spawning a program,
//!   re-running the current executable, or forking and running a closure)
//!   and returns a [`Report`] of how each ended, or an [`Error`] that names
//!   the failing rank and carries the same report.
//! * The worker: [`is_worker`], [`set_result`], [`set_error`], and a
//!   [`Context`] for the rank's place in the group and the collectives on
//!   slices of [`Element`] types (`f32`, `f64`, `i32`, `i64`).
//! * Gradient averaging for any framework: a [`Reducer`] (built with
//!   [`ReducerBuilder`]) owns a set of gradient buffers, lends them out for
//!   writing, and averages them across the ranks in buckets, DDP-style.
//! * Training runs carried out by the library (LibTorch, no Python): a
//!   [`Trainer`] fits, validates, tests or predicts with the built-in MLP or a
//!   TorchScript model on [`Data`] in ranks forked from this process, and
//!   returns rank 0's [`RunResult`] (checkpoint, metrics, predictions).
//!
//! ```no_run
//! use ddpspawn::{Context, Launcher, ReduceOp};
//!
//! fn main() -> ddpspawn::Result<()> {
//!     if ddpspawn::is_worker() {
//!         let ctx = Context::from_env()?;
//!         let mut x = [ctx.rank() as f64 + 1.0];
//!         ctx.all_reduce(&mut x, ReduceOp::Sum)?;
//!         if ctx.rank() == 0 {
//!             ddpspawn::set_result(&x[0].to_le_bytes())?;
//!         }
//!         return Ok(());
//!     }
//!     let report = Launcher::new(2).spawn_current_exe(std::iter::empty::<&str>())?;
//!     let bytes = report.result().expect("rank 0 sets a result");
//!     println!("sum = {}", f64::from_le_bytes(bytes.try_into().unwrap()));
//!     Ok(())
//! }
//! ```
//!
//! Strings cross the C boundary as `CString`s: a NUL byte inside one is an
//! [`Error::InvalidArgument`], never a panic.
//!
//! The library: `ddpspawn-sys` finds `libddpspawn.so.1` at build time through
//! `DDPSPAWN_LIB_DIR` or pkg-config and loads it at the first call
//! (`$DDPSPAWN_LIBRARY` overrides the path at run time), so a binary needs no
//! rpath and no build script of its own.

mod arrivals;
mod checkpoint;
mod clipping;
mod comm_hook;
mod context;
mod defaults;
mod element;
mod error;
mod grad_buffer;
mod launcher;
mod metrics;
mod reducer;
mod sampler;
mod tensor;
mod trainer;
mod worker;

pub use arrivals::{RankArrivals, StragglerReport};
pub use checkpoint::load_checkpoint;
pub use clipping::{clip_grad_norm, clip_grad_value};
pub use comm_hook::{Bucket, CommHook};
pub use context::Context;
pub use element::{DType, Element, ReduceOp};
pub use error::{Error, ErrorKind, Result};
pub use grad_buffer::{GradBuffer, GradBufferMut};
pub use launcher::{Launcher, RankReport, RankState, Report};
pub use reducer::{NoSync, Reducer, ReducerBuilder};
pub use sampler::DistributedSampler;
pub use tensor::{Device, TensorReducer, TensorRef, TensorType};
pub use trainer::{Data, RunResult, Trainer};
pub use worker::{is_worker, serve_forks_if_forkserver, set_error, set_result};

/// Re-export of the raw declarations.
pub use ddpspawn_sys as sys;

/// The ABI major version this crate was written against
/// (`DDPSPAWN_ABI_VERSION`).
pub const ABI_VERSION: i32 = ddpspawn_sys::DDPSPAWN_ABI_VERSION;

/// The ABI major version of the loaded library.
pub fn abi_version() -> i32 {
    // SAFETY: no arguments.
    unsafe { ddpspawn_sys::ddpspawn_abi_version() }
}

/// The loaded library's version, e.g. `"0.1.0"`.
pub fn version() -> String {
    // SAFETY: never NULL; copied at once.
    unsafe { error::c_str_to_string(ddpspawn_sys::ddpspawn_version()) }
}

/// What the loaded library was built with, as `(key, value)` pairs: `version`, `torch`, `cuda`,
/// `nccl` and `backends` (see `ddpspawn_build_info` in the C header).
pub fn build_info() -> Vec<(String, String)> {
    // SAFETY: static storage, never NULL; copied at once.
    let text = unsafe { error::c_str_to_string(ddpspawn_sys::ddpspawn_build_info()) };
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `Ok(())` when the loaded library speaks [`ABI_VERSION`], else
/// [`Error::Unavailable`]. [`Launcher`] and [`Context`] check this before
/// their first C call, and so does [`Trainer`].
pub fn check_abi_version() -> Result<()> {
    let loaded = abi_version();
    if loaded == ABI_VERSION {
        Ok(())
    } else {
        Err(Error::Unavailable {
            message: format!(
                "libddpspawn has ABI version {loaded}, this crate needs {ABI_VERSION}"
            ),
        })
    }
}
