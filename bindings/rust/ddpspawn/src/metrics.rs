// Metrics for a loop of one's own in the Trainer's metrics.csv (the C ABI's
// ddpspawn_log_metrics). No logic here.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ddpspawn_sys as sys;

use crate::context::Context;
use crate::error::{check, to_c_string, Result};

impl Context {
    /// Lightning's `log_dict`: on rank 0, makes `dir` where missing and
    /// appends a row per value to `dir`/metrics.csv (the Trainer's CSV
    /// logger's file: `epoch,step,name,value`); the other ranks write
    /// nothing (no collective). A name that is empty or holds a comma, a
    /// quote or a line break is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), and then no
    /// row is written.
    pub fn log_metrics(
        &self,
        dir: impl AsRef<Path>,
        epoch: i64,
        step: i64,
        values: &[(&str, f64)],
    ) -> Result<()> {
        let dir = to_c_string("the log directory", dir.as_ref().as_os_str().as_bytes())?;
        let names: Vec<CString> = values
            .iter()
            .map(|(name, _)| to_c_string("a metric's name", *name))
            .collect::<Result<_>>()?;
        let name_ptrs: Vec<_> = names.iter().map(|n| n.as_ptr()).collect();
        let numbers: Vec<f64> = values.iter().map(|(_, v)| *v).collect();
        // SAFETY: a live context; the strings and arrays outlive the call.
        check(unsafe {
            sys::ddpspawn_log_metrics(
                self.as_mut_ptr(),
                dir.as_ptr(),
                epoch,
                step,
                name_ptrs.as_ptr(),
                numbers.as_ptr(),
                values.len(),
            )
        })
    }
}
