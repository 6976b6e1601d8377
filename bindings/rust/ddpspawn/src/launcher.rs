// The launching side: the `Launcher` builder that starts N workers (spawn a
// program, re-run the current executable, fork them from a server program, or
// fork and run a closure) and the
// `Report` of how each rank ended (in `launcher/report.rs`).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::time::Duration;

use ddpspawn_sys as sys;

use crate::defaults::library_defaults;
use crate::error::{check, last_error, to_c_string, Error, Result};

pub(crate) mod report;
mod report_reading;
pub use report::{RankReport, RankState, Report};
pub(crate) use report_reading::last_run_report;

/// Builds and runs a job of `nprocs` worker processes.
///
/// The builder methods only record settings; every check happens in the
/// terminal methods ([`spawn_command`](Launcher::spawn_command),
/// [`spawn_current_exe`](Launcher::spawn_current_exe),
/// [`forkserver_command`](Launcher::forkserver_command),
/// [`forkserver_current_exe`](Launcher::forkserver_current_exe),
/// [`fork`](Launcher::fork)), which return before starting any process when
/// an argument is invalid. A `Launcher` can run any number of jobs.
///
/// Each terminal method blocks until every rank has ended. It returns the
/// [`Report`] when every rank exited 0. Otherwise it returns the error, and
/// errors that end a started job ([`Error::WorkerFailed`], [`Error::Timeout`],
/// [`Error::Interrupted`]) carry the same report (see [`Error::report`]).
///
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> ddpspawn::Result<()> {
/// let report = ddpspawn::Launcher::new(2)
///     .timeout(Duration::from_secs(60))
///     .env("MY_SETTING", "1")
///     .spawn_command("./my_worker", ["--epochs", "3"])?;
/// println!("rank 0 returned {:?}", report.result());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Launcher starts nothing until one of its terminal methods (spawn_command, \
              forkserver_command, fork ...) runs it"]
pub struct Launcher {
    nprocs: usize,
    timeout: Option<Duration>,
    grace_period: Option<Duration>,
    env: Vec<(OsString, OsString)>,
    master_addr: Option<String>,
    master_port: Option<u16>,
    nnodes: usize,
    node_rank: usize,
    max_restarts: usize,
}

impl Launcher {
    /// A launcher for `nprocs` ranks (at least 1; 0 is rejected when the job
    /// is created).
    pub fn new(nprocs: usize) -> Launcher {
        Launcher {
            nprocs,
            timeout: None,
            grace_period: None,
            env: Vec::new(),
            master_addr: None,
            master_port: None,
            nnodes: 1,
            node_rank: 0,
            max_restarts: 0,
        }
    }

    /// Limit for the whole job. Past it every rank is stopped and the job
    /// fails with [`Error::Timeout`]. `Duration::ZERO` means no limit (the
    /// default).
    pub fn timeout(mut self, timeout: Duration) -> Launcher {
        self.timeout = Some(timeout);
        self
    }

    /// After the first failure, how long the other ranks get between SIGTERM
    /// and SIGKILL (default 5 s).
    pub fn grace_period(mut self, grace_period: Duration) -> Launcher {
        self.grace_period = Some(grace_period);
        self
    }

    /// Adds `key=value` to every rank's environment (every start method). A
    /// later call with the same key replaces the value. An empty key, a key
    /// with `=`, or a NUL byte in either is an [`Error::InvalidArgument`]
    /// from the terminal method.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Launcher {
        let key = key.as_ref().to_os_string();
        let value = value.as_ref().to_os_string();
        match self.env.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.env.push((key, value)),
        }
        self
    }

    /// `MASTER_ADDR` given to the workers (default 127.0.0.1). One node's
    /// ranks meet privately, not there; with [`nnodes`](Launcher::nnodes)
    /// above 1 it is node 0's launcher's address, which every node needs.
    pub fn master_addr(mut self, addr: impl Into<String>) -> Launcher {
        self.master_addr = Some(addr.into());
        self
    }

    /// `MASTER_PORT` given to the workers (default: a free port; 0 means the
    /// default too).
    pub fn master_port(mut self, port: u16) -> Launcher {
        self.master_port = Some(port);
        self
    }

    /// A job of `nnodes` hosts, one launcher each (torchrun's `--nnodes`;
    /// default 1): node 0's launcher serves the rendezvous at
    /// [`master_addr`](Launcher::master_addr):[`master_port`](Launcher::master_port),
    /// both required, and every node's report carries rank 0's result.
    pub fn nnodes(mut self, nnodes: usize) -> Launcher {
        self.nnodes = nnodes;
        self
    }

    /// This launcher's node in [0, nnodes) (torchrun's `--node-rank`; default
    /// 0): it starts ranks `node_rank * nprocs` to `node_rank * nprocs +
    /// nprocs - 1`; the report's ranks are still numbered from 0.
    pub fn node_rank(mut self, node_rank: usize) -> Launcher {
        self.node_rank = node_rank;
        self
    }

    /// torchrun's `--max-restarts` (default 0): when a rank fails, every rank
    /// starts again, up to this many times, each restart announced on
    /// stderr. Each start's ranks read which it is in
    /// `TORCHELASTIC_RESTART_COUNT` (0, 1, ...) and continue from whatever
    /// state they keep; the report is the last start's, and
    /// [`Report::restarts`] says how many there were. Not after an interrupt
    /// or the job's timeout.
    pub fn max_restarts(mut self, max_restarts: usize) -> Launcher {
        self.max_restarts = max_restarts;
        self
    }

    /// Starts every rank as `program args...` (the program is searched on
    /// `PATH`) in a fresh process and waits for all of them.
    pub fn spawn_command<P, I, S>(&self, program: P, args: I) -> Result<Report>
    where
        P: AsRef<OsStr>,
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_program(b"spawn\0", program.as_ref(), args)
    }

    /// Starts every rank as the current executable
    /// ([`std::env::current_exe`]) with `args`, and waits for all of them.
    /// The program tells the two roles apart with [`is_worker`](crate::is_worker).
    pub fn spawn_current_exe<I, S>(&self, args: I) -> Result<Report>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.spawn_command(current_exe()?, args)
    }

    /// Starts one server process as `program args...` (searched on `PATH`),
    /// which forks every rank, and waits for all of them. The server loads
    /// the program and its libraries (LibTorch) once; the ranks get spawn's
    /// isolation from this process at close to fork's cost, and later jobs of
    /// this thread with the same program, arguments and environment fork from
    /// the same server (it ends with the thread that started it). The
    /// program's `main` must call
    /// [`serve_forks_if_forkserver`](crate::serve_forks_if_forkserver) first;
    /// a program that does not is an [`Error::FailedPrecondition`] naming it.
    pub fn forkserver_command<P, I, S>(&self, program: P, args: I) -> Result<Report>
    where
        P: AsRef<OsStr>,
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_program(b"forkserver\0", program.as_ref(), args)
    }

    /// [`forkserver_command`](Launcher::forkserver_command) with the current
    /// executable as the server.
    pub fn forkserver_current_exe<I, S>(&self, args: I) -> Result<Report>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.forkserver_command(current_exe()?, args)
    }

    /// Runs a job whose ranks run `program args...`, started by `method`.
    fn run_program<I, S>(&self, method: &'static [u8], program: &OsStr, args: I) -> Result<Report>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut argv = vec![to_c_string("program", program.as_bytes())?];
        for arg in args {
            argv.push(to_c_string("argument", arg.as_ref().as_bytes())?);
        }
        let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(ptr::null());
        let job = self.create_job(method, argv_ptrs.as_ptr(), None, ptr::null_mut())?;
        run(&job)
    }

    /// Forks every rank from this process; each child runs `worker(rank)`
    /// and exits with its return value (0 = success). The parent waits for
    /// all of them and never calls `worker` itself.
    ///
    /// The children start as copies of this process, so the closure can use
    /// anything it captured. A panic in the closure is caught in the child:
    /// its message becomes the rank's error text
    /// ([`set_error`](crate::set_error)), recorded by a panic hook at the
    /// panic (so before unwinding drops the rank's `Context`), and the exit
    /// code is 101. A panic the closure catches itself is recorded too. Rust
    /// destructors of the parent's values do not run in the children.
    ///
    /// # Safety
    ///
    /// This forks the calling process. Only the calling thread exists in a
    /// child, so any lock another thread held at the moment of the fork stays
    /// locked there forever, and any state other threads were changing may
    /// be half-written. Call this when the process is effectively
    /// single-threaded (in `main` before starting threads, not from a libtest
    /// test running beside others), and let the closure use only what the
    /// calling thread owns. The spawn start methods have no such constraint.
    pub unsafe fn fork<F>(&self, worker: F) -> Result<Report>
    where
        F: FnMut(usize) -> i32,
    {
        let mut worker = worker;
        let user_data = &mut worker as *mut F as *mut c_void;
        let job = self.create_job(b"fork\0", ptr::null(), Some(trampoline::<F>), user_data)?;
        // What is buffered now would otherwise be printed by every child too.
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        let report = run(&job);
        // `worker` must outlive the job's start; keep it alive until here.
        drop(worker);
        report
    }

    /// Checks the settings, builds the option struct and creates the job
    /// (the library copies every string and array).
    fn create_job(
        &self,
        start_method: &'static [u8],
        argv: *const *const c_char,
        worker_fn: sys::ddpspawn_worker_fn,
        user_data: *mut c_void,
    ) -> Result<Job> {
        crate::check_abi_version()?;
        let nprocs = i32::try_from(self.nprocs)
            .map_err(|_| Error::invalid(format!("nprocs {} is too large", self.nprocs)))?;
        let nnodes = i32::try_from(self.nnodes)
            .map_err(|_| Error::invalid(format!("nnodes {} is too large", self.nnodes)))?;
        let node_rank = i32::try_from(self.node_rank)
            .map_err(|_| Error::invalid(format!("node_rank {} is too large", self.node_rank)))?;
        let max_restarts = i32::try_from(self.max_restarts).map_err(|_| {
            Error::invalid(format!("max_restarts {} is too large", self.max_restarts))
        })?;

        let mut env = Vec::with_capacity(self.env.len());
        for (key, value) in &self.env {
            let key_bytes = key.as_bytes();
            if key_bytes.is_empty() || key_bytes.contains(&b'=') {
                return Err(Error::invalid(format!(
                    "environment name {:?} is empty or contains '='",
                    key
                )));
            }
            let mut entry = key.clone().into_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            env.push(to_c_string("environment entry", entry)?);
        }
        let mut env_ptrs: Vec<*const c_char> = env.iter().map(|e| e.as_ptr()).collect();
        env_ptrs.push(ptr::null());

        let master_addr = match &self.master_addr {
            Some(addr) => Some(to_c_string("master_addr", addr.as_bytes())?),
            None => None,
        };

        let mut options: sys::ddpspawn_launch_options = library_defaults()?;
        options.nprocs = nprocs;
        options.start_method = start_method.as_ptr() as *const c_char;
        options.argv = argv;
        options.env = if env.is_empty() {
            ptr::null()
        } else {
            env_ptrs.as_ptr()
        };
        options.worker_fn = worker_fn;
        options.user_data = user_data;
        if let Some(timeout) = self.timeout {
            options.timeout_s = timeout.as_secs_f64();
        }
        if let Some(grace) = self.grace_period {
            options.grace_period_s = grace.as_secs_f64();
        }
        if let Some(addr) = &master_addr {
            options.master_addr = addr.as_ptr();
        }
        if let Some(port) = self.master_port {
            options.master_port = i32::from(port);
        }
        options.nnodes = nnodes;
        options.node_rank = node_rank;
        options.max_restarts = max_restarts;

        let mut job: *mut sys::ddpspawn_job = ptr::null_mut();
        // SAFETY: every pointer in `options` is valid until this returns.
        check(unsafe { sys::ddpspawn_job_create(&options, &mut job) })?;
        NonNull::new(job).map(Job).ok_or_else(|| Error::Internal {
            message: "ddpspawn_job_create returned OK and no job".to_string(),
        })
    }
}

/// This process's executable, for the `*_current_exe` launches.
fn current_exe() -> Result<std::path::PathBuf> {
    std::env::current_exe().map_err(|e| Error::Internal {
        message: format!("cannot find the current executable: {e}"),
    })
}

/// Owns a `ddpspawn_job`.
struct Job(NonNull<sys::ddpspawn_job>);

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: created by ddpspawn_job_create, destroyed once.
        unsafe { sys::ddpspawn_job_destroy(self.0.as_ptr()) }
    }
}

/// Runs the job and builds the outcome.
fn run(job: &Job) -> Result<Report> {
    // SAFETY: a live job. In fork mode the children never return from here.
    let status = unsafe { sys::ddpspawn_job_run(job.0.as_ptr()) };
    if status == sys::DDPSPAWN_OK {
        return report_reading::job_report(job);
    }
    // Read the message before any other ddpspawn call replaces it.
    let mut error = Error::from_code(status, last_error());
    if let Ok(report) = report_reading::job_report(job) {
        error.attach_report(report);
    }
    Err(error)
}

/// The fork-mode entry point: calls the closure behind `user_data` in the
/// child and turns a panic into an error text and exit code 101.
unsafe extern "C" fn trampoline<F>(rank: i32, user_data: *mut c_void) -> c_int
where
    F: FnMut(usize) -> i32,
{
    // SAFETY: `user_data` is the `F` that `Launcher::fork` keeps alive; this
    // child owns its copy of it.
    let worker = &mut *(user_data as *mut F);
    let rank_index = usize::try_from(rank).unwrap_or(0);
    // Reported at the panic, before unwinding drops this rank's `Context`
    // (closing its group): the peers that its leaving fails report after it,
    // so the launcher names this rank.
    let previous_hook = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        report_panic(rank, info.payload());
        previous_hook(info);
    }));
    let code = match panic::catch_unwind(AssertUnwindSafe(|| worker(rank_index))) {
        Ok(code) => code,
        Err(payload) => {
            // Again, for a closure that replaced the hook (the first report
            // keeps its place).
            report_panic(rank, &*payload);
            101
        }
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    code
}

/// Records a panic's message as the rank's error text.
fn report_panic(rank: i32, payload: &(dyn std::any::Any + Send)) {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_string());
    let _ = crate::set_error(&format!("rank {rank} panicked: {what}"));
}
