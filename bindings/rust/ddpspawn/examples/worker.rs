//! A ddpspawn worker program, and the one the integration tests launch.
//!
//! Run it through a launcher, e.g.
//! `ddpspawn::Launcher::new(2).spawn_command("target/debug/examples/worker", ["collectives"])`.
//! The first argument picks what every rank does:
//!
//! * `collectives`: checks rank/world size and every collective against the
//!   values it must give; rank 0 returns `collectives ok world=N`.
//! * `result TEXT`: rank 0 returns TEXT.
//! * `env`: rank 0 returns `$DDPSPAWN_TEST_VALUE|$MASTER_ADDR|$MASTER_PORT|$RANK|$WORLD_SIZE`.
//! * `none`: every rank exits 0 without a result.
//! * `edge CASE`: an edge case (see `edge`); rank 0 returns what happened.
//! * `fail`: rank 1 calls `set_error` and exits 3; the others sleep.
//! * `exit CODE`: rank 1 exits with CODE; the others sleep.
//! * `abort`: rank 1 aborts (SIGABRT); the others sleep.
//! * `sleep SECONDS`: every rank sleeps.
//!
//! A check that fails calls `set_error` with what went wrong and exits 1.

use std::fmt::Debug;
use std::process;
use std::thread;
use std::time::Duration;

use ddpspawn::{Context, ErrorKind, ReduceOp};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !ddpspawn::is_worker() {
        eprintln!("worker: start me through a ddpspawn launcher");
        process::exit(2);
    }
    let rank = env_number("RANK");
    let mode = args.first().map(String::as_str).unwrap_or("");
    let arg = args.get(1).cloned().unwrap_or_default();
    match mode {
        "collectives" => {
            if let Err(message) = collectives() {
                fail(&message);
            }
        }
        "result" => {
            if rank == 0 {
                ddpspawn::set_result(arg.as_bytes()).unwrap_or_else(|e| fail(&e.to_string()));
            }
        }
        "env" => {
            if rank == 0 {
                let var = |name: &str| std::env::var(name).unwrap_or_default();
                let text = format!(
                    "{}|{}|{}|{}|{}",
                    var("DDPSPAWN_TEST_VALUE"),
                    var("MASTER_ADDR"),
                    var("MASTER_PORT"),
                    var("RANK"),
                    var("WORLD_SIZE")
                );
                ddpspawn::set_result(text.as_bytes()).unwrap_or_else(|e| fail(&e.to_string()));
            }
        }
        "none" => {}
        "edge" => {
            let out = edge(&arg, rank).unwrap_or_else(|e| fail(&format!("edge {arg}: {e}")));
            if rank == 0 {
                ddpspawn::set_result(&out).unwrap_or_else(|e| fail(&e.to_string()));
            }
        }
        "fail" => {
            if rank == 1 {
                ddpspawn::set_error("rank 1 failed on purpose").expect("set_error");
                process::exit(3);
            }
            thread::sleep(Duration::from_secs(60));
        }
        "exit" => {
            if rank == 1 {
                process::exit(arg.parse().expect("exit CODE"));
            }
            thread::sleep(Duration::from_secs(60));
        }
        "abort" => {
            if rank == 1 {
                process::abort();
            }
            thread::sleep(Duration::from_secs(60));
        }
        "sleep" => thread::sleep(Duration::from_secs(arg.parse().expect("sleep SECONDS"))),
        other => fail(&format!("unknown mode {other:?}")),
    }
}

/// Reports `message` as this rank's error and exits 1.
fn fail(message: &str) -> ! {
    eprintln!("worker: {message}");
    let _ = ddpspawn::set_error(message);
    process::exit(1);
}

fn env_number(name: &str) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fail(&format!("{name} is not set to a number")))
}

/// `Err` with a description unless `got == want`.
fn expect_eq<T: PartialEq + Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

/// Every collective, checked against the values it must give.
fn collectives() -> Result<(), String> {
    let ctx = Context::from_env().map_err(|e| format!("Context::from_env: {e}"))?;
    let e = |what: &str| {
        let what = what.to_string();
        move |err: ddpspawn::Error| format!("{what}: {err}")
    };
    let n = ctx.world_size();
    let r = ctx.rank();
    expect_eq("rank", r, env_number("RANK"))?;
    expect_eq("world_size", n, env_number("WORLD_SIZE"))?;
    expect_eq("local_rank", ctx.local_rank(), env_number("LOCAL_RANK"))?;
    expect_eq("local_world_size", ctx.local_world_size(), n)?;
    expect_eq("node_rank", ctx.node_rank(), 0)?;
    expect_eq("environment", ctx.environment().as_str(), "ddpspawn")?;
    let (nf, rf) = (n as f64, r as f64);

    // all_reduce, every op, every element type.
    let mut x = [rf as f32 + 1.0, 2.0 * (rf as f32 + 1.0)];
    ctx.all_reduce(&mut x, ReduceOp::Sum)
        .map_err(e("sum f32"))?;
    let s = (n * (n + 1) / 2) as f32;
    expect_eq("all_reduce sum f32", x, [s, 2.0 * s])?;

    let mut x = [rf, 10.0];
    ctx.all_reduce(&mut x, ReduceOp::Mean)
        .map_err(e("mean f64"))?;
    expect_eq("all_reduce mean f64", x, [(nf - 1.0) / 2.0, 10.0])?;

    let ri = r as i32;
    let sum_i = (n * (n - 1) / 2) as i32;
    let mut x = [ri, -ri, 5];
    ctx.all_reduce(&mut x, ReduceOp::Mean)
        .map_err(e("mean i32"))?;
    let ni = n as i32;
    expect_eq("all_reduce mean i32", x, [sum_i / ni, -sum_i / ni, 5])?;

    let mut x = [r as i64 - 10, 100 - r as i64];
    ctx.all_reduce(&mut x, ReduceOp::Min)
        .map_err(e("min i64"))?;
    expect_eq("all_reduce min i64", x, [-10, 100 - (n as i64 - 1)])?;

    let mut x = [ri * 3, -ri];
    ctx.all_reduce(&mut x, ReduceOp::Max)
        .map_err(e("max i32"))?;
    expect_eq("all_reduce max i32", x, [3 * (ni - 1), 0])?;

    let mut x = [rf + 1.0];
    ctx.all_reduce(&mut x, ReduceOp::Product)
        .map_err(e("product f64"))?;
    let factorial: f64 = (1..=n).map(|k| k as f64).product();
    expect_eq("all_reduce product f64", x, [factorial])?;

    let mut x = [2i64, -1];
    ctx.all_reduce(&mut x, ReduceOp::Product)
        .map_err(e("product i64"))?;
    let sign = if n % 2 == 0 { 1 } else { -1 };
    expect_eq("all_reduce product i64", x, [1i64 << n, sign])?;

    let mut x = [rf as f32];
    ctx.all_reduce(&mut x, ReduceOp::Max)
        .map_err(e("max f32"))?;
    expect_eq("all_reduce max f32", x, [nf as f32 - 1.0])?;

    // reduce: only dst changes.
    let dst = n - 1;
    let mut x = [ri + 1, 1];
    ctx.reduce(&mut x, ReduceOp::Sum, dst)
        .map_err(e("reduce"))?;
    if r == dst {
        expect_eq("reduce on dst", x, [sum_i + ni, ni])?;
    } else {
        expect_eq("reduce off dst", x, [ri + 1, 1])?;
    }

    // broadcast.
    let src = n - 1;
    let mut x = if r == src { [7i64, 8, 9] } else { [0i64; 3] };
    ctx.broadcast(&mut x, src).map_err(e("broadcast i64"))?;
    expect_eq("broadcast i64", x, [7, 8, 9])?;
    let mut x = [rf as f32 + 0.25; 4];
    ctx.broadcast(&mut x, 0).map_err(e("broadcast f32"))?;
    expect_eq("broadcast f32", x, [0.25f32; 4])?;

    let src = 1.min(n - 1);
    let mine = if r == src {
        b"hello from the source".to_vec()
    } else {
        vec![b'x'; r + 3]
    };
    let got = ctx
        .broadcast_bytes(&mine, src)
        .map_err(e("broadcast_bytes"))?;
    expect_eq("broadcast_bytes", got.as_slice(), b"hello from the source")?;
    let got = ctx
        .broadcast_bytes(&[], 0)
        .map_err(e("broadcast_bytes empty"))?;
    expect_eq("broadcast_bytes empty", got.len(), 0)?;

    // all_gather.
    let got = ctx
        .all_gather(&[ri, ri * 10])
        .map_err(e("all_gather i32"))?;
    let want: Vec<i32> = (0..ni).flat_map(|k| [k, k * 10]).collect();
    expect_eq("all_gather i32", got, want)?;
    let got = ctx.all_gather(&[rf + 0.5]).map_err(e("all_gather f64"))?;
    let want: Vec<f64> = (0..n).map(|k| k as f64 + 0.5).collect();
    expect_eq("all_gather f64", got, want)?;

    // all_gather_bytes, a different size per rank (rank 0 sends nothing).
    let mine = vec![b'a' + r as u8; r];
    let got = ctx.all_gather_bytes(&mine).map_err(e("all_gather_bytes"))?;
    let want: Vec<Vec<u8>> = (0..n).map(|k| vec![b'a' + k as u8; k]).collect();
    expect_eq("all_gather_bytes", got, want)?;

    // Bad arguments are errors, not crashes (every rank makes the same call).
    let mut x = [1.0f64];
    let err = ctx.broadcast(&mut x, n).err().map(|e| e.kind());
    expect_eq("broadcast to rank n", err, Some(ErrorKind::InvalidArgument))?;
    let err = ctx.barrier("a\0b").err().map(|e| e.kind());
    expect_eq(
        "barrier name with NUL",
        err,
        Some(ErrorKind::InvalidArgument),
    )?;
    if r != 0 {
        let err = ddpspawn::set_result(b"not rank 0").err().map(|e| e.kind());
        expect_eq(
            "set_result off rank 0",
            err,
            Some(ErrorKind::FailedPrecondition),
        )?;
    }

    ctx.barrier("end").map_err(e("barrier"))?;
    if r == 0 {
        ddpspawn::set_result(format!("collectives ok world={n}").as_bytes())
            .map_err(e("set_result"))?;
    }
    Ok(())
}

/// Edge cases; returns the bytes rank 0 hands back.
fn edge(case: &str, rank: usize) -> ddpspawn::Result<Vec<u8>> {
    let kind = |r: ddpspawn::Result<()>| match r {
        Ok(()) => "Ok".to_string(),
        Err(e) => format!("{:?}", e.kind()),
    };
    Ok(match case {
        // Zero-length buffers are fine.
        "empty" => {
            let ctx = Context::from_env()?;
            let mut none: [f32; 0] = [];
            ctx.all_reduce(&mut none, ReduceOp::Sum)?;
            ctx.broadcast::<f64>(&mut [], 0)?;
            ctx.reduce::<i64>(&mut [], ReduceOp::Max, 0)?;
            let gathered = ctx.all_gather::<i32>(&[])?;
            let bytes = ctx.all_gather_bytes(&[])?;
            format!("{gathered:?} {bytes:?}").into_bytes()
        }
        // Out-of-range ranks.
        "bad-rank" => {
            let ctx = Context::from_env()?;
            let a = kind(ctx.broadcast_bytes(b"x", 99).map(|_| ()));
            let b = kind(ctx.reduce(&mut [1i32], ReduceOp::Sum, 99));
            format!("{a} {b}").into_bytes()
        }
        // nccl: Unavailable on a CPU build of LibTorch.
        "nccl" => {
            kind(Context::with_options("nccl", Duration::from_secs(10)).map(|_| ())).into_bytes()
        }
        // Rank 1 never joins the all-reduce: rank 0 times out.
        "collective-timeout" => {
            let ctx = Context::with_options("gloo", Duration::from_secs(2))?;
            if rank == 1 {
                thread::sleep(Duration::from_secs(6));
                return Ok(Vec::new());
            }
            kind(ctx.all_reduce(&mut [1.0f32], ReduceOp::Sum)).into_bytes()
        }
        // Rank 1 leaves the group: rank 0's all-reduce fails.
        "peer-gone" => {
            let ctx = Context::with_options("gloo", Duration::from_secs(20))?;
            if rank == 1 {
                return Ok(Vec::new());
            }
            thread::sleep(Duration::from_secs(1));
            kind(ctx.all_reduce(&mut [1.0f32], ReduceOp::Sum)).into_bytes()
        }
        // Buffers of some megabytes.
        "large" => {
            let ctx = Context::from_env()?;
            let n = 1 << 20;
            let w = ctx.world_size() as f32;
            let mut v: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 + rank as f32).collect();
            ctx.all_reduce(&mut v, ReduceOp::Sum)?;
            let bad = (0..n)
                .filter(|&i| v[i] != w * (i % 1000) as f32 + w * (w - 1.0) / 2.0)
                .count();
            let got = ctx.broadcast_bytes(&pattern(4 << 20), 0)?;
            format!("bad={bad} broadcast_ok={}", got == pattern(4 << 20)).into_bytes()
        }
        "result-empty" => Vec::new(),
        "result-replaced" => {
            if rank == 0 {
                ddpspawn::set_result(b"first")?;
            }
            b"second".to_vec()
        }
        "result-large" => pattern(8 << 20),
        other => format!("unknown edge case {other}").into_bytes(),
    })
}

/// `len` bytes of a fixed pattern.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}
