//! Helpers shared by the integration tests (`mod common;` in each): the
//! worker fixture and launches of it, temporary paths, a group of one, skips
//! that fail under `DDPSPAWN_REQUIRE_ALL_TESTS=1`, and the small test runner
//! of the binaries that have their own `main`.

// Each test binary uses only some of these.
#![allow(dead_code)]

use std::env;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{self, Command};
use std::thread;
use std::time::Duration;

use ddpspawn::{Context, Launcher, Report};

/// The worker fixture `tests/fixtures/worker.rs` (Cargo.toml's `[[example]]`
/// `worker`, which `cargo test` builds), next to this test binary's directory
/// (`target/<profile>/examples/worker`), or `$DDPSPAWN_TEST_WORKER`.
pub fn worker() -> PathBuf {
    if let Some(path) = env::var_os("DDPSPAWN_TEST_WORKER") {
        return PathBuf::from(path);
    }
    let exe = env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary in target/<profile>/deps");
    let path = profile_dir.join("examples").join("worker");
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test` (which builds the worker fixture) \
         or `cargo build --example worker` first",
        path.display()
    );
    path
}

/// How soon a failed, timed-out or interrupted job must be reported when its
/// other ranks sleep 60 s or more: well before they would finish, so only a
/// launcher that stops them passes.
pub const FAILURE_BOUND: Duration = Duration::from_secs(20);

/// Asserts that a failure first seen at `started` came within
/// [`FAILURE_BOUND`].
pub fn assert_well_before_the_sleepers(started: std::time::Instant) {
    let elapsed = started.elapsed();
    assert!(
        elapsed < FAILURE_BOUND,
        "the failure took {elapsed:?} to be reported; the launcher should stop the sleeping \
         ranks at once (bound {FAILURE_BOUND:?}, they sleep 60 s or more)"
    );
}

/// A launcher with a generous safety limit, so a hang fails the test.
pub fn launcher(nprocs: usize) -> Launcher {
    Launcher::new(nprocs)
        .timeout(Duration::from_secs(240))
        .grace_period(Duration::from_secs(2))
}

/// The worker fixture with `args` as every one of `nprocs` ranks.
pub fn run(nprocs: usize, args: &[&str]) -> ddpspawn::Result<Report> {
    launcher(nprocs).spawn_command(worker(), args)
}

/// A new directory of this test process's own for `name`'s files: created
/// exclusively (mode 0700; a path that exists already, whoever made it, is
/// never reused) under Bazel's TEST_TMPDIR when it is set (Bazel removes it),
/// else the system's temp dir.
pub fn private_dir(name: &str) -> PathBuf {
    let base = env::var_os("TEST_TMPDIR").map_or_else(env::temp_dir, PathBuf::from);
    for attempt in 0.. {
        let dir = base.join(format!("ddpspawn-rs-{}-{name}-{attempt}", process::id()));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create {}: {e}", dir.display()),
        }
    }
    unreachable!()
}

/// The variable that makes a test that cannot run fail instead of skipping
/// (tools/test sets it to 1 for every Bazel test).
pub const REQUIRE_ALL_TESTS: &str = "DDPSPAWN_REQUIRE_ALL_TESTS";

/// None when a test that cannot run (for `why`) may be skipped, with
/// `setting` the value of [`REQUIRE_ALL_TESTS`] (unset, empty or 0); else the
/// failure message. A value other than 0 or 1 counts as 1, and says so.
pub fn skip_failure(setting: Option<&str>, why: &str) -> Option<String> {
    let value = setting.unwrap_or("");
    if value.is_empty() || value == "0" {
        return None;
    }
    let why = format!("this test cannot run here: {why}");
    Some(if value == "1" {
        format!("{why} ({REQUIRE_ALL_TESTS}=1 makes a skip a failure)")
    } else {
        format!("{why} (and {REQUIRE_ALL_TESTS}={value:?} is neither 0 nor 1; taken as 1)")
    })
}

/// Skips what the caller cannot test (it prints why and the caller returns),
/// or, under `DDPSPAWN_REQUIRE_ALL_TESTS=1`, fails the test saying why.
pub fn skip_or_fail(why: &str) {
    let setting = env::var_os(REQUIRE_ALL_TESTS).map(|v| v.to_string_lossy().into_owned());
    if let Some(message) = skip_failure(setting.as_deref(), why) {
        panic!("{message}");
    }
    eprintln!("skipping: {why}");
}

/// The variables a cluster environment is detected from, and their prefixes
/// (as bindings/python/tests/test_context.py).
const CLUSTER_NAMES: [&str; 9] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "DDPSPAWN_RUN_DIR",
];
const CLUSTER_PREFIXES: [&str; 4] = ["SLURM_", "TORCHELASTIC_", "PMI_", "OMPI_"];

fn cluster_variables() -> Vec<String> {
    env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| {
            CLUSTER_NAMES.contains(&name.as_str())
                || CLUSTER_PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .collect()
}

/// A group of one (gloo, 60 s timeout); or None when the environment
/// describes a cluster (the test runs under torchrun or SLURM, say), after
/// running the calling test again in a child process of this test binary
/// without those variables, and asserting that it passed there. Either way
/// the caller's checks run: on None it returns.
pub fn solo() -> Option<Context> {
    let set = cluster_variables();
    if set.is_empty() {
        let ctx = Context::with_options("gloo", Duration::from_secs(60)).unwrap();
        assert_eq!(ctx.world_size(), 1);
        return Some(ctx);
    }
    // libtest runs each test on a thread named after it.
    let test = match thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => {
            skip_or_fail(&format!(
                "a group of one needs an environment without {set:?}, and this test's name, \
                 to run it again without them, is unknown (libtest names each test's thread)"
            ));
            return None;
        }
    };
    eprintln!("{set:?} set: running {test} again in a child process without them");
    let mut child = Command::new(env::current_exe().expect("current_exe"));
    child.args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"]);
    for name in &set {
        child.env_remove(name);
    }
    let out = child.output().expect("run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test}, run again without {set:?}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    None
}

/// The outcome of [`run_tests`].
pub struct Outcome {
    pub passed: usize,
    pub failed: Vec<&'static str>,
}

/// For the test binaries with their own `main` (`harness = false`): runs the
/// tests selected by the command line (arguments that do not start with `-`
/// filter by name) one after another in this thread, each through `run`, and
/// prints libtest-style lines. A test fails by panicking.
pub fn run_tests<T>(tests: &[(&'static str, T)], mut run: impl FnMut(&'static str, &T)) -> Outcome {
    let filters: Vec<String> = env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<_> = tests
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();

    let plural = if selected.len() == 1 { "" } else { "s" };
    println!("\nrunning {} test{plural}", selected.len());
    let mut failed = Vec::new();
    for (name, test) in selected.iter().copied() {
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| run(name, test)));
        println!(
            "test {name} ... {}",
            if outcome.is_ok() { "ok" } else { "FAILED" }
        );
        if outcome.is_err() {
            failed.push(*name);
        }
    }
    Outcome {
        passed: selected.len() - failed.len(),
        failed,
    }
}

/// Prints the summary line of [`run_tests`]' outcome (`note` follows the
/// list of failures) and exits with 101 when a test failed.
pub fn finish(outcome: &Outcome, note: &str) {
    let Outcome { passed, failed } = outcome;
    if failed.is_empty() {
        println!("\ntest result: ok. {passed} passed; 0 failed\n");
    } else {
        println!("\nfailures: {failed:?}{note}");
        println!(
            "\ntest result: FAILED. {passed} passed; {} failed\n",
            failed.len()
        );
        process::exit(101);
    }
}

/// A test of [`run_tests_in_dirs`]: it gets a fresh directory of its own.
pub type DirTest = fn(&Path);

/// Runs `tests` (those the command line's filters select), each with a fresh
/// directory of its own under a root named after `suite` in the temp dir,
/// and ends the process as libtest would. The root is removed when every test
/// passed, and kept (and named) when one failed.
pub fn run_tests_in_dirs(suite: &str, tests: &[(&'static str, DirTest)]) {
    let root = private_dir(suite);
    let outcome = run_tests(tests, |name, test| {
        let dir = root.join(name);
        fs::create_dir_all(&dir).expect("create a test directory");
        test(&dir);
    });
    if outcome.failed.is_empty() {
        let _ = fs::remove_dir_all(&root);
    }
    finish(&outcome, &format!(" (files kept in {})", root.display()));
}
