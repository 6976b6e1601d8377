// The worker side's free functions: whether this process is a ddpspawn
// worker, and handing a result or an error text back to the launcher.

use std::os::raw::c_void;

use ddpspawn_sys as sys;

use crate::error::{check, to_c_string, Result};

/// For the forkserver start method ([`Launcher::forkserver_command`](crate::Launcher::forkserver_command)):
/// call it first in `main`, before starting threads or touching CUDA. In the
/// server a launcher started it serves forks and never returns (it exits
/// with the launcher); in each rank the server forks it returns `true`, with
/// the rank's environment and working directory; in any other process it
/// returns `false` at once. A server that cannot serve exits with code 2.
pub fn serve_forks_if_forkserver() -> bool {
    // SAFETY: no arguments; it forks only in a process started as a server,
    // whose main thread is the only one when main() calls this first.
    unsafe { sys::ddpspawn_serve_forks_if_forkserver() != 0 }
}

/// Whether this process was started by a ddpspawn launcher (any start method).
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
