//! Helpers shared by the integration tests (`mod common;` in each): the
//! worker fixture and launches of it, temporary paths, a group of one, and
//! the small test runner of the binaries that have their own `main`.

// Each test binary uses only some of these.
#![allow(dead_code)]

use std::env;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::process;
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

/// A path in the temp dir unique to this test process and `name`.
pub fn temp_path(name: &str) -> PathBuf {
    env::temp_dir().join(format!("ddpspawn-rs-{}-{name}", process::id()))
}

/// A group of one (gloo, 60 s timeout), or None (the test is skipped) when
/// the environment describes a cluster.
pub fn solo() -> Option<Context> {
    for name in [
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
    ] {
        if env::var_os(name).is_some() {
            eprintln!("skipping: {name} is set in the test environment");
            return None;
        }
    }
    let ctx = Context::with_options("gloo", Duration::from_secs(60)).unwrap();
    assert_eq!(ctx.world_size(), 1);
    Some(ctx)
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
