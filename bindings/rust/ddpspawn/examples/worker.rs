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
//! * `reducer CASE`: checks the gradient reducer (see `reducer`): `means`,
//!   `unused`, `no-sync`, `hooks`, `bad-options`; rank 0 returns a summary.
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

use ddpspawn::{Context, ErrorKind, GradBuffer, ReduceOp, Reducer, ReducerBuilder};

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
        "reducer" => {
            let out = reducer(&arg).unwrap_or_else(|e| fail(&format!("reducer {arg}: {e}")));
            if rank == 0 {
                ddpspawn::set_result(out.as_bytes()).unwrap_or_else(|e| fail(&e.to_string()));
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

// ---------------------------------------------------------------------------
// The gradient reducer
// ---------------------------------------------------------------------------

/// Lengths and element types of the buffers the reducer cases use; the two
/// long ones exceed a tiny bucket cap on their own.
const MIXED: [(usize, ddpspawn::DType); 7] = {
    use ddpspawn::DType::*;
    [
        (5, Float32),
        (3000, Float32),
        (4, Float64),
        (1, Float32),
        (2000, Float64),
        (6, Int32),
        (3, Int64),
    ]
};

fn mixed_buffers() -> Vec<GradBuffer> {
    use ddpspawn::DType::*;
    MIXED
        .iter()
        .map(|&(len, dtype)| match dtype {
            Float32 => GradBuffer::zeros::<f32>(len),
            Float64 => GradBuffer::zeros::<f64>(len),
            Int32 => GradBuffer::zeros::<i32>(len),
            Int64 => GradBuffer::zeros::<i64>(len),
        })
        .collect()
}

/// What rank `rank` writes into buffer `k` in `iteration`, and the mean of
/// that over `n` ranks (exact in binary; the integer means are exact too).
fn grad_value(rank: usize, k: usize, iteration: usize) -> f64 {
    ((rank + 1) * (k + 1)) as f64 + 0.5 * iteration as f64
}
fn grad_mean(n: usize, k: usize, iteration: usize) -> f64 {
    (n + 1) as f64 / 2.0 * (k + 1) as f64 + 0.5 * iteration as f64
}
fn int_value(rank: usize, k: usize, iteration: usize) -> i64 {
    (2 * (rank + 1) * (k + 1) + 2 * iteration) as i64
}
fn int_mean(n: usize, k: usize, iteration: usize) -> i64 {
    ((n + 1) * (k + 1) + 2 * iteration) as i64
}

/// Fills every buffer with this rank's values for `iteration`.
fn write_grads(reducer: &mut Reducer, rank: usize, iteration: usize) {
    for (k, buffer) in reducer.buffers_mut().into_iter().enumerate() {
        let v = grad_value(rank, k, iteration);
        let i = int_value(rank, k, iteration);
        match buffer.dtype() {
            ddpspawn::DType::Float32 => buffer.into_slice::<f32>().unwrap().fill(v as f32),
            ddpspawn::DType::Float64 => buffer.into_slice::<f64>().unwrap().fill(v),
            ddpspawn::DType::Int32 => buffer.into_slice::<i32>().unwrap().fill(i as i32),
            ddpspawn::DType::Int64 => buffer.into_slice::<i64>().unwrap().fill(i),
        }
    }
}

/// Checks that every buffer holds the mean over `n` ranks for `iteration`.
fn check_means(reducer: &Reducer, n: usize, iteration: usize, what: &str) -> Result<(), String> {
    for k in 0..reducer.len() {
        let (v, i) = (grad_mean(n, k, iteration), int_mean(n, k, iteration));
        let e = |err: ddpspawn::Error| format!("{what}: buffer {k}: {err}");
        let ok = match reducer.dtype(k).unwrap() {
            ddpspawn::DType::Float32 => reducer
                .buffer::<f32>(k)
                .map_err(e)?
                .iter()
                .all(|&x| x == v as f32),
            ddpspawn::DType::Float64 => {
                reducer.buffer::<f64>(k).map_err(e)?.iter().all(|&x| x == v)
            }
            ddpspawn::DType::Int32 => reducer
                .buffer::<i32>(k)
                .map_err(e)?
                .iter()
                .all(|&x| x == i as i32),
            ddpspawn::DType::Int64 => reducer.buffer::<i64>(k).map_err(e)?.iter().all(|&x| x == i),
        };
        if !ok {
            return Err(format!(
                "{what}: buffer {k} does not hold the mean ({v} / {i})"
            ));
        }
    }
    Ok(())
}

/// 0..n in an order that depends on `seed` (a small LCG shuffle).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (state >> 33) as usize % (i + 1);
        order.swap(i, j);
    }
    order
}

fn reducer(case: &str) -> Result<String, String> {
    let ctx = Context::from_env().map_err(|e| format!("Context::from_env: {e}"))?;
    let (r, n) = (ctx.rank(), ctx.world_size());
    let e = |what: &str| {
        let what = what.to_string();
        move |err: ddpspawn::Error| format!("{what}: {err}")
    };
    match case {
        // Means after finalize, for every mark order, with the default caps
        // and with caps so small that the buffers spread over many buckets.
        "means" => {
            let mut counts = Vec::new();
            for (cap, first_cap) in [(25.0, 1.0), (0.001, 0.0001)] {
                for order in ["forward", "reverse", "random"] {
                    let what = format!("caps {cap}/{first_cap}, order {order}");
                    let mut reducer = ReducerBuilder::new()
                        .bucket_cap_mb(cap)
                        .first_bucket_cap_mb(first_cap)
                        .build(&ctx, mixed_buffers())
                        .map_err(e(&what))?;
                    for iteration in 0..3 {
                        write_grads(&mut reducer, r, iteration);
                        let marks: Vec<usize> = match order {
                            "forward" => (0..MIXED.len()).collect(),
                            "reverse" => (0..MIXED.len()).rev().collect(),
                            _ => shuffled(MIXED.len(), (100 * r + iteration) as u64),
                        };
                        for k in marks {
                            reducer.mark_ready(k).map_err(e(&what))?;
                        }
                        reducer.finalize().map_err(e(&what))?;
                        check_means(&reducer, n, iteration, &what)?;
                    }
                    if order == "forward" {
                        counts.push(reducer.bucket_count());
                    }
                    // The buffers come back with the last means in them.
                    let buffers = reducer.into_buffers();
                    expect_eq(
                        "into_buffers f64",
                        buffers[2].as_slice::<f64>().map(|s| s.to_vec()),
                        Some(vec![grad_mean(n, 2, 2); 4]),
                    )?;
                }
            }
            Ok(format!(
                "means ok world={n} buckets={}/{}",
                counts[0], counts[1]
            ))
        }
        // Buffer 0 marked by every rank, 1 by none, 2 by rank 1 only; then an
        // iteration that marks everything.
        "unused" => {
            let mean = (n + 1) as f32 / 2.0;
            for find_unused in [true, false] {
                let what = format!("find_unused_parameters={find_unused}");
                let buffers = vec![
                    GradBuffer::from(vec![r as f32 + 1.0; 3]),
                    GradBuffer::from(vec![100.0 + r as f64; 4]),
                    GradBuffer::from(vec![10.0 * (r as f32 + 1.0); 2]),
                ];
                let mut reducer = ReducerBuilder::new()
                    .find_unused_parameters(find_unused)
                    .build(&ctx, buffers)
                    .map_err(e(&what))?;
                reducer.mark_ready(0).map_err(e(&what))?;
                if r == 1 {
                    reducer.mark_ready(2).map_err(e(&what))?;
                }
                reducer.finalize().map_err(e(&what))?;
                let used = reducer.buffer::<f32>(0).map_err(e(&what))?.to_vec();
                let unused = reducer.buffer::<f64>(1).map_err(e(&what))?.to_vec();
                let partly = reducer.buffer::<f32>(2).map_err(e(&what))?.to_vec();
                expect_eq(&format!("{what}: used"), used, vec![mean; 3])?;
                // Untouched with find_unused_parameters; else zeros count.
                let want_unused = if find_unused { 100.0 + r as f64 } else { 0.0 };
                expect_eq(&format!("{what}: unused"), unused, vec![want_unused; 4])?;
                // Only rank 1 marked it: the others count as zero.
                expect_eq(&format!("{what}: partly"), partly, vec![20.0 / n as f32; 2])?;

                reducer
                    .buffer_mut::<f32>(0)
                    .map_err(e(&what))?
                    .fill(r as f32 + 1.0);
                reducer
                    .buffer_mut::<f64>(1)
                    .map_err(e(&what))?
                    .fill(r as f64 + 1.0);
                reducer
                    .buffer_mut::<f32>(2)
                    .map_err(e(&what))?
                    .fill(r as f32 + 1.0);
                for k in 0..3 {
                    reducer.mark_ready(k).map_err(e(&what))?;
                }
                reducer.finalize().map_err(e(&what))?;
                let all = reducer.into_buffers();
                expect_eq(
                    &format!("{what}: second iteration"),
                    all,
                    vec![
                        GradBuffer::from(vec![mean; 3]),
                        GradBuffer::from(vec![mean as f64; 4]),
                        GradBuffer::from(vec![mean; 2]),
                    ],
                )?;
            }
            Ok(format!("unused ok world={n}"))
        }
        // Two iterations of local accumulation, then a synced one.
        "no-sync" => {
            let mut reducer = ctx
                .reducer(vec![vec![0.0f32; 5], vec![0.0f32; 2]])
                .map_err(e("reducer"))?;
            let rf = r as f32 + 1.0;
            {
                let mut local = reducer.no_sync().map_err(e("no_sync"))?;
                expect_eq("sync inside no_sync", local.sync_enabled(), false)?;
                for _ in 0..2 {
                    for k in 0..2 {
                        local
                            .buffer_mut::<f32>(k)
                            .map_err(e("write"))?
                            .iter_mut()
                            .for_each(|x| *x += rf);
                        local.mark_ready(k).map_err(e("mark under no_sync"))?;
                    }
                    local.finalize().map_err(e("finalize under no_sync"))?;
                }
                // Nothing was communicated.
                expect_eq(
                    "accumulated locally",
                    local.buffer::<f32>(0).unwrap().to_vec(),
                    vec![2.0 * rf; 5],
                )?;
            }
            expect_eq("sync after no_sync", reducer.sync_enabled(), true)?;
            for k in 0..2 {
                reducer
                    .buffer_mut::<f32>(k)
                    .map_err(e("write"))?
                    .iter_mut()
                    .for_each(|x| *x += rf);
                reducer.mark_ready(k).map_err(e("mark"))?;
            }
            reducer.finalize().map_err(e("finalize"))?;
            let mean = (n + 1) as f32 / 2.0;
            expect_eq(
                "synced sum",
                reducer.buffer::<f32>(0).unwrap().to_vec(),
                vec![3.0 * mean; 5],
            )?;
            expect_eq(
                "synced sum",
                reducer.buffer::<f32>(1).unwrap().to_vec(),
                vec![3.0 * mean; 2],
            )?;
            Ok(format!("no-sync ok world={n}"))
        }
        // The compressed hooks stay within their tolerance (and do compress);
        // powersgd sends flat buffers as they are.
        "hooks" => {
            let mut report = Vec::new();
            for (hook, tolerance) in [
                ("fp16", 5e-3),
                ("bf16", 2e-2),
                ("powersgd", 1e-6),
                ("allreduce", 1e-6),
            ] {
                let value =
                    |rank: usize, j: usize| (rank + 1) as f64 * 0.1 + j as f64 * 0.0137 + 0.3;
                let buffers = vec![
                    GradBuffer::from((0..300).map(|j| value(r, j) as f32).collect::<Vec<f32>>()),
                    GradBuffer::from((0..17).map(|j| value(r, j)).collect::<Vec<f64>>()),
                ];
                let mut reducer = ReducerBuilder::new()
                    .comm_hook(hook)
                    .powersgd_start_iteration(0)
                    .build(&ctx, buffers)
                    .map_err(e(hook))?;
                reducer.mark_ready(1).map_err(e(hook))?;
                reducer.mark_ready(0).map_err(e(hook))?;
                reducer.finalize().map_err(e(hook))?;
                let exact = |j: usize| (0..n).map(|k| value(k, j)).sum::<f64>() / n as f64;
                let mut worst = 0.0f64;
                for (j, &x) in reducer.buffer::<f32>(0).unwrap().iter().enumerate() {
                    worst = worst.max((x as f64 - exact(j)).abs() / exact(j));
                }
                for (j, &x) in reducer.buffer::<f64>(1).unwrap().iter().enumerate() {
                    worst = worst.max((x - exact(j)).abs() / exact(j));
                }
                if worst.is_nan() || worst >= tolerance {
                    return Err(format!("{hook}: relative error {worst} over {tolerance}"));
                }
                if (hook == "fp16" || hook == "bf16") && worst < 1e-6 {
                    return Err(format!("{hook}: exact result, the hook did not compress"));
                }
                report.push(format!("{hook}={worst:.1e}"));
            }
            Ok(format!("hooks ok {}", report.join(" ")))
        }
        // Bad options and buffers are errors of the right kind; every rank
        // makes the same calls (and none of them communicates).
        "bad-options" => Ok(bad_reducer_options(&ctx)),
        other => Err(format!("unknown reducer case {other:?}")),
    }
}

/// The error kinds of bad reducer options and buffers, space-separated
/// ("Ok" for a success).
fn bad_reducer_options(ctx: &Context) -> String {
    let kind = |r: ddpspawn::Result<Reducer>| match r {
        Ok(_) => "Ok".to_string(),
        Err(e) => format!("{:?}", e.kind()),
    };
    let one = || vec![vec![1.0f32; 2]];
    [
        kind(ReducerBuilder::new().comm_hook("bogus").build(ctx, one())),
        kind(ReducerBuilder::new().comm_hook("fp16\0").build(ctx, one())),
        kind(
            ReducerBuilder::new()
                .comm_hook("powersgd")
                .powersgd_rank(0)
                .build(ctx, one()),
        ),
        kind(
            ReducerBuilder::new()
                .powersgd_start_iteration(u32::MAX)
                .build(ctx, one()),
        ),
        kind(ReducerBuilder::new().bucket_cap_mb(0.0).build(ctx, one())),
        kind(
            ReducerBuilder::new()
                .first_bucket_cap_mb(f64::NAN)
                .build(ctx, one()),
        ),
        kind(ctx.reducer(Vec::<Vec<f64>>::new())),
        kind(ctx.reducer(vec![vec![1i64], vec![]])),
    ]
    .join(" ")
}
