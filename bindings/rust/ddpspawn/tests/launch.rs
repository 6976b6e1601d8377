//! Launcher and worker tests with real processes: each test launches the
//! worker fixture `tests/fixtures/worker.rs` (built by `cargo test`) as every
//! rank and checks the report or the error.

mod common;

use std::time::{Duration, Instant};

use common::{launcher, private_dir, run, solo, worker};
use ddpspawn::{Context, Error, ErrorKind, Launcher, RankState, ReduceOp};

#[test]
fn abi_version_matches_header() {
    assert_eq!(ddpspawn::ABI_VERSION, 1);
    assert_eq!(ddpspawn::abi_version(), 1);
    ddpspawn::check_abi_version().unwrap();
    let info: std::collections::HashMap<_, _> = ddpspawn::build_info().into_iter().collect();
    assert_eq!(info["version"], ddpspawn::version());
    assert!(info["torch"].starts_with("2."), "{info:?}");
    assert!(info["backends"].starts_with("gloo"), "{info:?}");
    assert!(!ddpspawn::version().is_empty());
}

#[test]
fn worker_calls_outside_a_worker() {
    assert!(!ddpspawn::is_worker());
    let err = ddpspawn::set_result(b"x").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(!err.message().is_empty());
    let err = ddpspawn::set_error("a\0b").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

#[test]
fn context_with_unknown_backend_is_invalid_argument() {
    let err = Context::with_options("no-such-backend", Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = Context::with_options("gl\0oo", Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

/// Outside any launcher and with no cluster variables, the context is a
/// group of one.
#[test]
fn single_process_context() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return, // it ran in a child process without the cluster variables
    };
    assert_eq!(ctx.rank(), 0);
    assert_eq!(ctx.world_size(), 1);
    assert_eq!(ctx.environment(), "env");
    let mut x = [1.5f64, -2.0];
    ctx.all_reduce(&mut x, ReduceOp::Sum).unwrap();
    assert_eq!(x, [1.5, -2.0]);
    assert_eq!(ctx.all_gather(&[3i64, 4]).unwrap(), vec![3, 4]);
    assert_eq!(ctx.all_gather_bytes(b"me").unwrap(), vec![b"me".to_vec()]);
    assert_eq!(ctx.broadcast_bytes(b"b", 0).unwrap(), b"b".to_vec());
    ctx.barrier("solo").unwrap();
}

/// With cluster variables set (as under torchrun or SLURM), the group-of-one
/// tests still run: `solo` runs them again in a child without the variables.
#[test]
fn group_of_one_tests_run_under_cluster_variables() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["single_process_context", "--exact", "--nocapture"])
        .env("RANK", "5")
        .env("SLURM_PROCID", "0")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
    assert!(
        stderr.contains("running single_process_context again in a child process"),
        "{stderr}"
    );
}

/// A skip is a skip unless DDPSPAWN_REQUIRE_ALL_TESTS is 1 (or any other
/// value but 0): then it is a failure that says why.
#[test]
fn skips_fail_when_every_test_is_required() {
    for setting in [None, Some(""), Some("0")] {
        assert_eq!(
            common::skip_failure(setting, "no root"),
            None,
            "{setting:?}"
        );
    }
    let failure = common::skip_failure(Some("1"), "no root").unwrap();
    assert!(failure.contains("no root"), "{failure}");
    assert!(
        failure.contains("DDPSPAWN_REQUIRE_ALL_TESTS=1"),
        "{failure}"
    );
    let failure = common::skip_failure(Some("yes"), "no root").unwrap();
    assert!(failure.contains("no root"), "{failure}");
    assert!(failure.contains("neither 0 nor 1"), "{failure}");
}

#[test]
fn rank0_result_comes_back() {
    let report = run(2, &["result", "hello from rank 0"]).unwrap();
    assert_eq!(report.result(), Some(&b"hello from rank 0"[..]));
    assert_eq!(report.failed_rank(), None);
    assert_eq!(report.nprocs(), 2);
    for (i, rank) in report.ranks().iter().enumerate() {
        assert_eq!(rank.rank, i);
        assert_eq!(rank.state, RankState::Exited(0));
        assert!(rank.success());
        assert_eq!(rank.exit_code(), Some(0));
        assert!(!rank.stopped_by_launcher);
        assert!(rank.pid.is_some());
        assert_eq!(rank.error, "");
    }
    assert_ne!(report.ranks()[0].pid, report.ranks()[1].pid);
    assert_eq!(report.into_result(), Some(b"hello from rank 0".to_vec()));
}

/// The rank slowed on purpose (40 ms before each of 20 all-reduces) is the
/// one the context's straggler report names, late by about that much. On a
/// loaded 2-core machine another rank is now and then descheduled for tens
/// of milliseconds (with a 10 ms slowdown CI saw the slowed rank last in
/// only 17 of 20, and 1.3 s late in all): it must be last in at least 18.
#[test]
fn the_slowed_rank_is_named() {
    let report = run(3, &["straggler", "2"]).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(report.into_result().unwrap()).unwrap();
    let fields: Vec<&str> = text.split('|').collect();
    assert_eq!(fields[..2], ["true", "Some(2)"], "{text}");
    let ranks: Vec<(i64, f64)> = fields[2]
        .split(',')
        .map(|r| {
            let (last, late) = r.split_once(':').unwrap();
            (last.parse().unwrap(), late.parse().unwrap())
        })
        .collect();
    assert_eq!(ranks[0].0 + ranks[1].0 + ranks[2].0, 20, "{text}");
    assert!(ranks[2].0 >= 18, "{text}");
    // Summed over the 20: 40 ms each, give or take a loaded machine's delays.
    assert!(ranks[2].1 > 600.0 && ranks[2].1 < 4000.0, "{text}");
    let percent = 100 * ranks[2].0 / 20;
    assert!(
        fields[3].starts_with(&format!(
            "rank 2 arrived last at {percent}% of 20 collectives"
        )),
        "{text}"
    );
}

#[test]
fn max_restarts_starts_the_ranks_again() {
    let report = launcher(2)
        .max_restarts(1)
        .spawn_command(worker(), ["fail-first-start"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.restarts(), 1);
    assert_eq!(report.result(), Some(&b"start 1"[..]));
    let err = run(2, &["fail-first-start"]).unwrap_err();
    assert!(err.to_string().contains("rank 1 fails in start 0"), "{err}");
}

#[test]
fn no_result_is_none() {
    let report = run(2, &["none"]).unwrap();
    assert_eq!(report.result(), None);
}

#[test]
fn collectives_two_ranks() {
    let report = run(2, &["collectives"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.result(), Some(&b"collectives ok world=2"[..]));
}

#[test]
fn collectives_four_ranks() {
    let report = run(4, &["collectives"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.result(), Some(&b"collectives ok world=4"[..]));
    assert_eq!(report.nprocs(), 4);
}

#[test]
fn forkserver_ranks_come_from_one_server_that_a_second_job_reuses() {
    let parent = || {
        let report = launcher(2)
            .forkserver_command(worker(), ["parent"])
            .unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(report.into_result().unwrap()).unwrap()
    };
    let (first, second) = (parent(), parent());
    assert_eq!(first, second);
    let server: u32 = first
        .strip_suffix(" served=true")
        .and_then(|t| t.strip_prefix("parent="))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    assert_ne!(server, std::process::id());
    // The server is an exec of the fixture, not a fork of this test.
    let exe = std::fs::read_link(format!("/proc/{server}/exe")).unwrap();
    assert_eq!(exe, worker().canonicalize().unwrap());
}

#[test]
fn forkserver_ranks_run_collectives_and_report_failures() {
    let report = launcher(3)
        .forkserver_command(worker(), ["collectives"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.result(), Some(&b"collectives ok world=3"[..]));
    let started = Instant::now();
    let err = launcher(2)
        .forkserver_command(worker(), ["fail"])
        .unwrap_err();
    common::assert_well_before_the_sleepers(started);
    assert_eq!(err.kind(), ErrorKind::WorkerFailed, "{err}");
    assert!(err.message().contains("rank 1 failed on purpose"), "{err}");
    assert_eq!(err.report().unwrap().failed_rank(), Some(1));
}

#[test]
fn forkserver_program_that_does_not_serve_is_named() {
    let err = launcher(2).forkserver_command("true", [""; 0]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{err}");
    assert!(
        err.message().contains("serve_forks_if_forkserver()"),
        "{err}"
    );
}

#[test]
fn two_launchers_run_one_job_of_two_nodes() {
    // Two launchers on this host, as two nodes would run them (the worker
    // fixture's `node` mode): one job of 4 ranks, whose rank 0's result both
    // launchers report.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port()
        .to_string();
    let nodes: Vec<_> = ["0", "1"]
        .iter()
        .map(|node| {
            std::process::Command::new(worker())
                .args(["node", node, &port])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for node in nodes {
        let output = node.wait_with_output().unwrap();
        assert!(output.status.success(), "{:?}", output.status);
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "collectives ok world=4\n"
        );
    }
}

#[test]
fn env_and_master_address_reach_the_workers() {
    let report = launcher(2)
        .env("DDPSPAWN_TEST_VALUE", "replaced")
        .env("DDPSPAWN_TEST_VALUE", "a=b c")
        .master_addr("127.0.0.1")
        .master_port(29517)
        .spawn_command(worker(), ["env"])
        .unwrap();
    assert_eq!(report.result(), Some(&b"a=b c|127.0.0.1|29517|0|2"[..]));
}

#[test]
fn failing_rank_is_reported() {
    let started = Instant::now();
    let err = run(2, &["fail"]).unwrap_err();
    match &err {
        Error::WorkerFailed { rank, message, .. } => {
            assert_eq!(*rank, 1, "{err}");
            assert!(message.contains("rank 1 failed on purpose"), "{message}");
        }
        other => panic!("expected WorkerFailed, got {other:?}"),
    }
    assert!(err.to_string().contains("rank 1"), "{err}");
    let report = err.report().expect("a job error carries its report");
    assert_eq!(report.failed_rank(), Some(1));
    let failed = report.rank(1).unwrap();
    assert_eq!(failed.exit_code(), Some(3));
    assert!(!failed.stopped_by_launcher);
    assert!(
        failed.error.contains("rank 1 failed on purpose"),
        "{failed:?}"
    );
    // Rank 0 sleeps for a minute; the launcher stops it after the failure.
    let other = report.rank(0).unwrap();
    assert!(other.stopped_by_launcher, "{other:?}");
    assert!(!other.success());
    common::assert_well_before_the_sleepers(started);
}

#[test]
fn exit_code_is_reported() {
    let started = Instant::now();
    let err = run(2, &["exit", "7"]).unwrap_err();
    common::assert_well_before_the_sleepers(started);
    assert!(
        matches!(err, Error::WorkerFailed { rank: 1, .. }),
        "{err:?}"
    );
    let report = err.into_report().unwrap();
    assert_eq!(report.rank(1).unwrap().state, RankState::Exited(7));
    assert!(report.rank(0).unwrap().stopped_by_launcher);
}

#[test]
fn signal_is_reported() {
    let started = Instant::now();
    let err = run(2, &["abort"]).unwrap_err();
    common::assert_well_before_the_sleepers(started);
    assert!(
        matches!(err, Error::WorkerFailed { rank: 1, .. }),
        "{err:?}"
    );
    let report = err.report().unwrap();
    assert_eq!(report.rank(1).unwrap().signal(), Some(6)); // SIGABRT
    assert!(!report.rank(1).unwrap().stopped_by_launcher);
}

#[test]
fn timeout_stops_every_rank() {
    let started = Instant::now();
    let err = Launcher::new(2)
        .timeout(Duration::from_secs(3))
        .grace_period(Duration::from_secs(1))
        .spawn_command(worker(), ["sleep", "60"])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let report = err.report().expect("a timeout carries the report");
    assert_eq!(report.failed_rank(), None);
    for rank in report.ranks() {
        assert!(rank.stopped_by_launcher, "{rank:?}");
        assert!(!rank.success(), "{rank:?}");
    }
    common::assert_well_before_the_sleepers(started);
}

#[test]
fn missing_program_fails() {
    let err = launcher(1)
        .spawn_command("/nonexistent/ddpspawn-no-such-program", ["x"])
        .unwrap_err();
    eprintln!("missing program: {err}");
}

/// Invalid input fails before any process starts: the would-be workers
/// create a marker file, and it must not appear. The first launch is the
/// control that shows the marker does appear when the job runs.
#[test]
fn invalid_input_errors_without_launching() {
    let dir = private_dir("marker");
    let marker = dir.join("marker");
    let script = format!("touch '{}'", marker.display());
    let touch = |l: Launcher| l.spawn_command("sh", ["-c", script.as_str()]);

    touch(launcher(1)).unwrap();
    assert!(marker.exists(), "control: the job did not run");
    std::fs::remove_file(&marker).unwrap();

    let cases: Vec<(&str, ddpspawn::Result<ddpspawn::Report>)> = vec![
        ("nprocs 0", touch(launcher(0))),
        ("NUL in env value", touch(launcher(1).env("X", "a\0b"))),
        ("NUL in env key", touch(launcher(1).env("X\0Y", "v"))),
        ("= in env key", touch(launcher(1).env("X=Y", "v"))),
        ("empty env key", touch(launcher(1).env("", "v"))),
        (
            "NUL in master_addr",
            touch(launcher(1).master_addr("127.0.0.1\0")),
        ),
        (
            "NUL in an argument",
            launcher(1).spawn_command("sh", ["-c", script.as_str(), "a\0b"]),
        ),
        (
            "NUL in the program",
            launcher(1).spawn_command("s\0h", ["-c", script.as_str()]),
        ),
        (
            "nprocs too large",
            touch(launcher(usize::try_from(i64::from(i32::MAX) + 1).unwrap())),
        ),
    ];
    for (what, result) in cases {
        let err = result.expect_err(what);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{what}: {err}");
        assert!(!err.message().is_empty(), "{what}");
        assert!(err.report().is_none(), "{what}");
        assert!(!marker.exists(), "{what}: a worker ran");
    }
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn any_program_can_be_a_rank() {
    let report = launcher(3)
        .spawn_command("true", Vec::<&str>::new())
        .unwrap();
    assert_eq!(report.nprocs(), 3);
    assert!(report.ranks().iter().all(|r| r.success()));
    assert_eq!(report.result(), None);
}

fn edge(nprocs: usize, case: &str) -> Vec<u8> {
    run(nprocs, &["edge", case])
        .unwrap_or_else(|e| panic!("{case}: {e}"))
        .into_result()
        .unwrap_or_else(|| panic!("{case}: no result"))
}

/// `len` bytes of the pattern the worker uses.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn zero_length_buffers() {
    assert_eq!(edge(2, "empty"), b"[] [[], []]");
}

#[test]
fn out_of_range_ranks_are_invalid_argument() {
    assert_eq!(edge(2, "bad-rank"), b"InvalidArgument InvalidArgument");
}

/// Whether CUDA would see a device here, told without CUDA: a device node
/// `/dev/nvidia<N>` (the driver makes one per GPU), unless
/// `CUDA_VISIBLE_DEVICES` hides them all (empty, or starting with -1).
fn cuda_device_visible() -> bool {
    if let Some(visible) = std::env::var_os("CUDA_VISIBLE_DEVICES") {
        let visible = visible.to_string_lossy();
        if visible.trim().is_empty() || visible.trim_start().starts_with("-1") {
            return false;
        }
    }
    std::fs::read_dir("/dev")
        .map(|entries| {
            entries.filter_map(|e| e.ok()).any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("nvidia").map_or(false, |n| {
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                })
            })
        })
        .unwrap_or(false)
}

/// nccl is Unavailable exactly when the library was built without NCCL
/// (build_info's nccl=none) or no CUDA device is present, saying which;
/// otherwise a group of one joins.
#[test]
fn nccl_is_unavailable_exactly_without_nccl_or_a_device() {
    let info: std::collections::HashMap<_, _> = ddpspawn::build_info().into_iter().collect();
    let built_with_nccl = info["nccl"] != "none";
    let device = cuda_device_visible();
    let got = String::from_utf8(edge(1, "nccl")).unwrap();
    if !built_with_nccl {
        assert!(
            got.starts_with("Unavailable: ") && got.contains("has none"),
            "a build without NCCL (build info {info:?}) must refuse nccl, saying so; got {got}"
        );
    } else if !device {
        assert!(
            got.starts_with("Unavailable: ") && got.contains("no CUDA device is present"),
            "with NCCL built in ({}) and no CUDA device visible here (no /dev/nvidia<N>, or \
             CUDA_VISIBLE_DEVICES hides them), nccl must be refused, saying so; got {got}",
            info["nccl"]
        );
    } else {
        assert_eq!(
            got, "Ok",
            "NCCL is built in ({}) and a CUDA device is visible here (/dev/nvidia<N>): a \
             group of one must join with nccl",
            info["nccl"]
        );
    }
}

#[test]
fn collective_past_its_timeout_is_timeout() {
    assert_eq!(edge(2, "collective-timeout"), b"Timeout");
}

#[test]
fn collective_with_a_peer_gone_is_internal() {
    assert_eq!(edge(2, "peer-gone"), b"Internal");
}

#[test]
fn large_buffers() {
    assert_eq!(edge(2, "large"), b"bad=0 broadcast_ok=true");
}

#[test]
fn empty_replaced_and_large_results() {
    assert_eq!(edge(2, "result-empty"), b"");
    assert_eq!(edge(2, "result-replaced"), b"second");
    assert!(edge(1, "result-large") == pattern(8 << 20));
}
