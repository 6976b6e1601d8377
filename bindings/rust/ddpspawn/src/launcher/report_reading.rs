// Reading a `Report` from the library: a finished job's, or this thread's last
// `ddpspawn_run`'s (a Trainer run).

use std::os::raw::{c_char, c_void};
use std::ptr;

use ddpspawn_sys as sys;

use super::report::{RankReport, RankState, Report};
use super::Job;
use crate::defaults::library_defaults;
use crate::error::{c_str_to_string, check, Result};

/// Reads the report of a job that has run.
pub(super) fn job_report(job: &Job) -> Result<Report> {
    let job = job.0.as_ptr() as *const sys::ddpspawn_job;
    // SAFETY (whole block): `job` is live; out-parameters are locals; the
    // strings and bytes the job owns are copied before the next call.
    unsafe {
        let ranks = read_ranks(
            sys::ddpspawn_job_nprocs(job),
            |rank, raw| sys::ddpspawn_job_rank_report(job, rank, raw),
            |rank, text| sys::ddpspawn_job_rank_error(job, rank, text),
        )?;
        let failed_rank = usize::try_from(sys::ddpspawn_job_failed_rank(job)).ok();

        let mut data: *const c_void = ptr::null();
        let mut size: usize = 0;
        let mut has_result: i32 = 0;
        check(sys::ddpspawn_job_result(
            job,
            &mut data,
            &mut size,
            &mut has_result,
        ))?;
        let result = if has_result == 0 {
            None
        } else if size == 0 || data.is_null() {
            Some(Vec::new())
        } else {
            Some(std::slice::from_raw_parts(data as *const u8, size).to_vec())
        };
        Ok(Report {
            ranks,
            failed_rank,
            result,
            restarts: usize::try_from(sys::ddpspawn_job_restarts(job)).unwrap_or(0),
        })
    }
}

/// The report of this thread's last `ddpspawn_run` (a [`Trainer`](crate::Trainer)
/// run), which hands its result back as text instead: `result` is `None`.
pub(crate) fn last_run_report() -> Result<Report> {
    // SAFETY (whole block): the calls read this thread's last run;
    // out-parameters are locals; the strings are copied before the next call.
    unsafe {
        let ranks = read_ranks(
            sys::ddpspawn_run_nprocs(),
            |rank, raw| sys::ddpspawn_run_rank_report(rank, raw),
            |rank, text| sys::ddpspawn_run_rank_error(rank, text),
        )?;
        Ok(Report {
            ranks,
            failed_rank: usize::try_from(sys::ddpspawn_run_failed_rank()).ok(),
            result: None,
            restarts: 0,
        })
    }
}

/// Every rank's outcome, read through `report_of` and `error_of` (a job's or
/// the last run's accessors), for ranks 0..nprocs.
///
/// # Safety
/// The accessors must be safe to call for every rank below `nprocs`, and the
/// text they return must stay valid until the next ddpspawn call.
unsafe fn read_ranks(
    nprocs: i32,
    report_of: impl Fn(i32, *mut sys::ddpspawn_rank_report) -> sys::ddpspawn_status,
    error_of: impl Fn(i32, *mut *const c_char) -> sys::ddpspawn_status,
) -> Result<Vec<RankReport>> {
    let mut ranks = Vec::with_capacity(usize::try_from(nprocs).unwrap_or(0));
    for rank in 0..nprocs.max(0) {
        let mut raw: sys::ddpspawn_rank_report = library_defaults()?;
        check(report_of(rank, &mut raw))?;
        let mut text: *const c_char = ptr::null();
        check(error_of(rank, &mut text))?;
        ranks.push(RankReport {
            rank: rank as usize,
            state: match raw.state {
                sys::DDPSPAWN_RANK_NOT_STARTED => RankState::NotStarted,
                sys::DDPSPAWN_RANK_RUNNING => RankState::Running,
                sys::DDPSPAWN_RANK_EXITED => RankState::Exited(raw.exit_code),
                sys::DDPSPAWN_RANK_SIGNALED => RankState::Signaled(raw.signal),
                other => RankState::Unknown(other),
            },
            pid: u32::try_from(raw.pid).ok().filter(|&pid| pid > 0),
            stopped_by_launcher: raw.stopped_by_launcher != 0,
            error: c_str_to_string(text),
        });
    }
    Ok(ranks)
}
