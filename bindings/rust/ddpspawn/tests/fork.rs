//! Fork-mode and current-executable tests. This binary has its own `main`
//! (`harness = false` in Cargo.toml) so that it forks from a single-threaded
//! process, and so that it can be its own worker program:
//! `Launcher::spawn_current_exe` re-runs it, and `main` sees `is_worker()`.
//! Arguments that do not start with `-` filter tests by name.

mod common;

use std::panic;
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use common::launcher;
use ddpspawn::{Context, Error, RankState, ReduceOp};

fn main() {
    if ddpspawn::is_worker() {
        process::exit(worker_main());
    }
    let tests: &[(&str, fn())] = &[
        ("fork_closure_result", fork_closure_result),
        ("fork_collectives", fork_collectives),
        ("fork_failing_rank", fork_failing_rank),
        ("fork_panic_is_caught", fork_panic_is_caught),
        ("spawn_current_exe", spawn_current_exe),
    ];
    let outcome = common::run_tests(tests, |_, test| test());
    common::finish(&outcome, "");
}

/// The role of this binary when `spawn_current_exe` re-runs it.
fn worker_main() -> i32 {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode != "current-exe-worker" {
        let _ = ddpspawn::set_error(&format!("unknown mode {mode:?}"));
        return 2;
    }
    let ctx = match Context::from_env() {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ddpspawn::set_error(&e.to_string());
            return 1;
        }
    };
    let mut x = [ctx.rank() as i64 + 1];
    if let Err(e) = ctx.all_reduce(&mut x, ReduceOp::Sum) {
        let _ = ddpspawn::set_error(&e.to_string());
        return 1;
    }
    if ctx.rank() == 0 {
        let text = format!("current exe ok world={} sum={}", ctx.world_size(), x[0]);
        if ddpspawn::set_result(text.as_bytes()).is_err() {
            return 1;
        }
    }
    0
}

fn spawn_current_exe() {
    let report = launcher(2)
        .spawn_current_exe(["current-exe-worker"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.result(), Some(&b"current exe ok world=2 sum=3"[..]));
}

/// The closure's captured state reaches the children; rank 0's result comes
/// back.
fn fork_closure_result() {
    let greeting = String::from("hello");
    let parent = process::id();
    // SAFETY: this test binary's main thread is its only thread.
    let report = unsafe {
        launcher(2).fork(move |rank| {
            if !ddpspawn::is_worker() || process::id() == parent {
                let _ = ddpspawn::set_error("not in a forked worker");
                return 1;
            }
            if rank == 0 {
                let text = format!("{greeting} from fork rank {rank}");
                if ddpspawn::set_result(text.as_bytes()).is_err() {
                    return 1;
                }
            }
            0
        })
    }
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.result(), Some(&b"hello from fork rank 0"[..]));
    assert!(report.ranks().iter().all(|r| r.success()));
    assert!(report
        .ranks()
        .iter()
        .all(|r| r.pid.is_some() && r.pid != Some(parent)));
}

/// Forked children join a process group and run a collective.
fn fork_collectives() {
    // SAFETY: single-threaded test binary.
    let report = unsafe {
        launcher(3).fork(|rank| {
            let run = || -> ddpspawn::Result<()> {
                let ctx = Context::from_env()?;
                let mut x = [rank as f32 + 1.0];
                ctx.all_reduce(&mut x, ReduceOp::Sum)?;
                let ranks = ctx.all_gather(&[ctx.rank() as i32])?;
                if ctx.rank() == 0 {
                    ddpspawn::set_result(format!("{} {:?}", x[0], ranks).as_bytes())?;
                }
                Ok(())
            };
            match run() {
                Ok(()) => 0,
                Err(e) => {
                    let _ = ddpspawn::set_error(&e.to_string());
                    1
                }
            }
        })
    }
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.result(), Some(&b"6 [0, 1, 2]"[..]));
}

/// A non-zero return value fails the job with that rank and its error text.
fn fork_failing_rank() {
    let started = Instant::now();
    // SAFETY: single-threaded test binary.
    let err = unsafe {
        launcher(2).fork(|rank| {
            if rank == 1 {
                let _ = ddpspawn::set_error("fork rank 1 says no");
                return 4;
            }
            thread::sleep(Duration::from_secs(60));
            0
        })
    }
    .unwrap_err();
    match &err {
        Error::WorkerFailed { rank, message, .. } => {
            assert_eq!(*rank, 1);
            assert!(message.contains("fork rank 1 says no"), "{message}");
        }
        other => panic!("expected WorkerFailed, got {other:?}"),
    }
    let report = err.report().unwrap();
    assert_eq!(report.rank(1).unwrap().state, RankState::Exited(4));
    assert!(report.rank(0).unwrap().stopped_by_launcher);
    common::assert_well_before_the_sleepers(started);
}

/// A panic in the closure becomes exit code 101 and the rank's error text.
fn fork_panic_is_caught() {
    // SAFETY: single-threaded test binary.
    let err = unsafe {
        launcher(2).fork(|rank| {
            if rank == 1 {
                // Keep the intended panic out of the test output.
                panic::set_hook(Box::new(|_| {}));
                panic!("boom in rank {rank}");
            }
            thread::sleep(Duration::from_secs(60));
            0
        })
    }
    .unwrap_err();
    assert!(
        matches!(err, Error::WorkerFailed { rank: 1, .. }),
        "{err:?}"
    );
    let failed = err.report().unwrap().rank(1).unwrap().clone();
    assert_eq!(failed.exit_code(), Some(101));
    assert!(failed.error.contains("boom in rank 1"), "{failed:?}");
}
