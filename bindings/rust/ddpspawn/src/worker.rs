// The worker side's free functions: whether this process is a ddpspawn
// worker, and handing a result or an error text back to the launcher.

use std::os::raw::c_void;

use ddpspawn_sys as sys;

use crate::error::{check, to_c_string, Result};

/// Whether this process was started by a ddpspawn launcher (spawn or fork).
pub fn is_worker() -> bool {
    // SAFETY: no arguments.
    unsafe { sys::ddpspawn_is_worker() != 0 }
}

/// Hands `data` back to the launcher, where it becomes
/// [`Report::result`](crate::Report::result); replaces any earlier result.
/// Only rank 0 may call it: [`Error::FailedPrecondition`](crate::Error::FailedPrecondition)
/// on other ranks, [`Error::Unavailable`](crate::Error::Unavailable) outside a
/// ddpspawn worker.
pub fn set_result(data: &[u8]) -> Result<()> {
    // SAFETY: `data` is valid for its length.
    check(unsafe { sys::ddpspawn_worker_set_result(data.as_ptr() as *const c_void, data.len()) })
}

/// Records why this rank is failing; the launcher puts it in its error
/// message and in [`RankReport::error`](crate::RankReport::error). Call it
/// before exiting non-zero. A NUL byte in `text` is an
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
pub fn set_error(text: &str) -> Result<()> {
    let text = to_c_string("error text", text)?;
    // SAFETY: a valid C string.
    check(unsafe { sys::ddpspawn_worker_set_error(text.as_ptr()) })
}
