// Errors of the safe API: one variant per ddpspawn status code, each with the
// message from ddpspawn_last_error(), plus the helpers that turn a status into
// an Error and Rust strings into C strings.

use std::error::Error as StdError;
use std::ffi::{CStr, CString};
use std::fmt;

use ddpspawn_sys as sys;

use crate::launcher::report::Report;

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A failed ddpspawn call: the kind (the C status code) and the library's
/// message.
///
/// Errors that end a launched job ([`Error::WorkerFailed`],
/// [`Error::Timeout`], [`Error::Interrupted`]) also carry the job's
/// [`Report`], filled as for a successful run, so the caller can see how
/// every rank ended (exit codes, signals, which ranks the launcher stopped,
/// each rank's error text). It is boxed to keep `Result<T>` small and is
/// `None` when the error did not come from a job (e.g. a collective timing
/// out inside a worker).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument: a NUL byte inside a string, a size out of range, an
    /// unknown name, `nprocs == 0` ...
    InvalidArgument { message: String },
    /// A worker failed. `rank` is the rank whose failure ended the job;
    /// `message` names it and the cause (including the text the worker gave
    /// to [`set_error`](crate::set_error)).
    WorkerFailed {
        rank: usize,
        message: String,
        report: Option<Box<Report>>,
    },
    /// The job, or a collective, ran past its timeout.
    Timeout {
        message: String,
        report: Option<Box<Report>>,
    },
    /// The launcher got SIGINT or SIGTERM and stopped the workers.
    Interrupted {
        message: String,
        report: Option<Box<Report>>,
    },
    /// Valid, but not available in this build (e.g. nccl on a CPU build), or
    /// a worker-only call outside a ddpspawn worker.
    Unavailable { message: String },
    /// A call in the wrong state (e.g. `set_result` on a rank other than 0).
    FailedPrecondition { message: String },
    /// A system call or a collective failed (peer gone, connection reset ...).
    Internal { message: String },
    /// A status code this crate does not know (a newer library).
    Unknown { code: i32, message: String },
}

/// The kind of an [`Error`] without its data, handy for comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    InvalidArgument,
    WorkerFailed,
    Timeout,
    Interrupted,
    Unavailable,
    FailedPrecondition,
    Internal,
    Unknown,
}

impl Error {
    /// Attaches `report` to this error (a failed rank, a timeout or an
    /// interrupt), and names the rank whose failure ended the job: the one the
    /// launcher attributed it to, else the first that failed on its own.
    pub(crate) fn attach_report(&mut self, report: Report) {
        match self {
            Error::WorkerFailed {
                rank, report: slot, ..
            } => {
                *rank = report
                    .failed_rank()
                    .unwrap_or_else(|| report.first_failure());
                *slot = Some(Box::new(report));
            }
            Error::Timeout { report: slot, .. } | Error::Interrupted { report: slot, .. } => {
                *slot = Some(Box::new(report));
            }
            _ => {}
        }
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::WorkerFailed { .. } => ErrorKind::WorkerFailed,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::Interrupted { .. } => ErrorKind::Interrupted,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::FailedPrecondition { .. } => ErrorKind::FailedPrecondition,
            Error::Internal { .. } => ErrorKind::Internal,
            Error::Unknown { .. } => ErrorKind::Unknown,
        }
    }

    /// The C status code (`DDPSPAWN_ERR_*`).
    pub fn code(&self) -> i32 {
        match self {
            Error::InvalidArgument { .. } => sys::DDPSPAWN_ERR_INVALID_ARGUMENT,
            Error::WorkerFailed { .. } => sys::DDPSPAWN_ERR_WORKER_FAILED,
            Error::Timeout { .. } => sys::DDPSPAWN_ERR_TIMEOUT,
            Error::Interrupted { .. } => sys::DDPSPAWN_ERR_INTERRUPTED,
            Error::Unavailable { .. } => sys::DDPSPAWN_ERR_UNAVAILABLE,
            Error::FailedPrecondition { .. } => sys::DDPSPAWN_ERR_FAILED_PRECONDITION,
            Error::Internal { .. } => sys::DDPSPAWN_ERR_INTERNAL,
            Error::Unknown { code, .. } => *code,
        }
    }

    /// The library's message (or this crate's, for checks made before any
    /// C call).
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument { message }
            | Error::WorkerFailed { message, .. }
            | Error::Timeout { message, .. }
            | Error::Interrupted { message, .. }
            | Error::Unavailable { message }
            | Error::FailedPrecondition { message }
            | Error::Internal { message }
            | Error::Unknown { message, .. } => message,
        }
    }

    /// The report of the job this error ended, if it came from a job.
    pub fn report(&self) -> Option<&Report> {
        match self {
            Error::WorkerFailed { report, .. }
            | Error::Timeout { report, .. }
            | Error::Interrupted { report, .. } => report.as_deref(),
            _ => None,
        }
    }

    /// Takes the report out of the error, if it has one.
    pub fn into_report(self) -> Option<Report> {
        match self {
            Error::WorkerFailed { report, .. }
            | Error::Timeout { report, .. }
            | Error::Interrupted { report, .. } => report.map(|r| *r),
            _ => None,
        }
    }

    /// Builds an error from a non-OK status and a message.
    pub(crate) fn from_code(code: i32, message: String) -> Error {
        match code {
            sys::DDPSPAWN_ERR_INVALID_ARGUMENT => Error::InvalidArgument { message },
            sys::DDPSPAWN_ERR_WORKER_FAILED => Error::WorkerFailed {
                // Set from the job by the launcher; 0 is only a placeholder.
                rank: 0,
                message,
                report: None,
            },
            sys::DDPSPAWN_ERR_TIMEOUT => Error::Timeout {
                message,
                report: None,
            },
            sys::DDPSPAWN_ERR_INTERRUPTED => Error::Interrupted {
                message,
                report: None,
            },
            sys::DDPSPAWN_ERR_UNAVAILABLE => Error::Unavailable { message },
            sys::DDPSPAWN_ERR_FAILED_PRECONDITION => Error::FailedPrecondition { message },
            sys::DDPSPAWN_ERR_INTERNAL => Error::Internal { message },
            code => Error::Unknown { code, message },
        }
    }

    /// An [`Error::InvalidArgument`] raised by this crate before calling C.
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument {
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            Error::InvalidArgument { .. } => "invalid argument",
            Error::WorkerFailed { .. } => "worker failed",
            Error::Timeout { .. } => "timeout",
            Error::Interrupted { .. } => "interrupted",
            Error::Unavailable { .. } => "unavailable",
            Error::FailedPrecondition { .. } => "failed precondition",
            Error::Internal { .. } => "internal error",
            Error::Unknown { code, .. } => return write!(f, "error {code}: {}", self.message()),
        };
        match self {
            // The library's message names the rank already.
            Error::WorkerFailed { rank, message, .. } if message.is_empty() => {
                write!(f, "{what} (rank {rank})")
            }
            _ if self.message().is_empty() => f.write_str(what),
            _ => write!(f, "{what}: {}", self.message()),
        }
    }
}

impl StdError for Error {}

/// The calling thread's `ddpspawn_last_error()`, copied.
pub(crate) fn last_error() -> String {
    // SAFETY: the header promises a valid NUL-terminated string, never NULL;
    // it is copied before any other ddpspawn call.
    unsafe { c_str_to_string(sys::ddpspawn_last_error()) }
}

/// `Ok(())` for `DDPSPAWN_OK`, else the error with the thread's last message.
/// Call right after the C function, on the same thread.
pub(crate) fn check(status: sys::ddpspawn_status) -> Result<()> {
    if status == sys::DDPSPAWN_OK {
        Ok(())
    } else {
        Err(Error::from_code(status, last_error()))
    }
}

/// Copies a C string owned by the library; NULL gives "".
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string valid for this call.
pub(crate) unsafe fn c_str_to_string(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        String::new()
    } else {
        CStr::from_ptr(ptr).to_string_lossy().into_owned()
    }
}

/// A C string for the library; a NUL byte inside is an
/// [`Error::InvalidArgument`] naming `what`.
pub(crate) fn to_c_string(what: &str, bytes: impl Into<Vec<u8>>) -> Result<CString> {
    CString::new(bytes).map_err(|e| {
        Error::invalid(format!(
            "{what} contains a NUL byte at position {}",
            e.nul_position()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_inside_is_invalid_argument() {
        let err = to_c_string("env value", "a\0b").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert_eq!(err.code(), sys::DDPSPAWN_ERR_INVALID_ARGUMENT);
        assert!(err.message().contains("env value"), "{err}");
        assert!(to_c_string("x", "fine").is_ok());
    }

    #[test]
    fn codes_round_trip() {
        for code in 1..=8 {
            let err = Error::from_code(code, "m".into());
            assert_eq!(err.code(), code);
            assert_eq!(err.message(), "m");
            assert!(err.to_string().ends_with(": m"), "{err}");
        }
    }
}
