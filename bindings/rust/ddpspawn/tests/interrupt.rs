//! SIGTERM sent to the launching process while it waits: the workers get it
//! and the job fails with `Error::Interrupted`. This binary has its own
//! `main` (`harness = false`) so the signal reaches no other test.

mod common;

use std::process::{self, Command};
use std::thread;
use std::time::{Duration, Instant};

use ddpspawn::{ErrorKind, Launcher};

fn main() {
    let tests: &[(&str, fn())] = &[("sigterm_interrupts_the_job", sigterm_interrupts_the_job)];
    let outcome = common::run_tests(tests, |_, test| test());
    common::finish(&outcome, "");
}

fn sigterm_interrupts_the_job() {
    let pid = process::id();
    let killer = thread::spawn(move || {
        // Long enough for the launcher to be waiting on the workers.
        thread::sleep(Duration::from_secs(3));
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
    });
    let started = Instant::now();
    let outcome = Launcher::new(2)
        .timeout(Duration::from_secs(120))
        .grace_period(Duration::from_secs(2))
        .spawn_command("sleep", ["60"]);
    killer.join().unwrap();

    let err = outcome.expect_err("the job was interrupted");
    assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
    let report = err.report().expect("an interrupt carries the report");
    assert_eq!(report.failed_rank(), None);
    for rank in report.ranks() {
        assert!(rank.stopped_by_launcher, "{rank:?}");
        assert!(!rank.success(), "{rank:?}");
    }
    common::assert_well_before_the_sleepers(started);

    // The launcher lives on, and can run another job.
    Launcher::new(1)
        .spawn_command("true", Vec::<&str>::new())
        .unwrap();
}
