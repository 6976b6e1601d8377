//! Gradient reducer tests: the API in a group of one here, and averaging
//! between real processes through the worker fixture
//! `tests/fixtures/worker.rs` (its `reducer CASE` modes check the values
//! themselves; rank 0 returns a summary).

mod common;

use common::{run, solo};
use ddpspawn::{DType, ErrorKind, GradBuffer, Reducer, ReducerBuilder};

/// Rank 0's summary of `reducer CASE` with `nprocs` ranks.
fn reducer_case(nprocs: usize, case: &str) -> String {
    let report = run(nprocs, &["reducer", case])
        .unwrap_or_else(|e| panic!("reducer {case} with {nprocs} ranks: {e}"));
    let bytes = report.into_result().expect("rank 0 returns a summary");
    String::from_utf8(bytes).expect("utf-8 summary")
}

// -- a group of one -----------------------------------------------------------

#[test]
fn group_of_one_keeps_values_and_lends_buffers() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return,
    };
    let buffers = vec![
        GradBuffer::from(vec![1.0f32, 2.0, 3.0]),
        GradBuffer::from(vec![-1.5f64; 2]),
        GradBuffer::from(vec![7i64]),
    ];
    let mut reducer = Reducer::new(&ctx, buffers).unwrap();
    assert_eq!(reducer.len(), 3);
    assert!(!reducer.is_empty());
    assert_eq!(reducer.bucket_count(), 3); // one per element type
    assert_eq!(reducer.dtype(1), Some(DType::Float64));
    assert_eq!(reducer.dtype(3), None);
    assert!(reducer.sync_enabled());
    for step in 0..3 {
        reducer.buffer_mut::<f32>(0).unwrap()[0] = step as f32;
        for k in (0..3).rev() {
            reducer.mark_ready(k).unwrap();
        }
        reducer.finalize().unwrap();
        assert_eq!(reducer.buffer::<f32>(0).unwrap(), &[step as f32, 2.0, 3.0]);
        assert_eq!(reducer.buffer::<f64>(1).unwrap(), &[-1.5, -1.5]);
        assert_eq!(reducer.buffer::<i64>(2).unwrap(), &[7]);
    }
    let debug = format!("{reducer:?}");
    assert!(debug.contains("buffers: 3"), "{debug}");
    let back = reducer.into_buffers();
    assert_eq!(back[0], GradBuffer::F32(vec![2.0, 2.0, 3.0]));
    assert_eq!(back[2].clone().into_vec::<i64>(), Ok(vec![7]));
    assert_eq!(
        back[2].clone().into_vec::<f32>(),
        Err(GradBuffer::I64(vec![7]))
    );
}

#[test]
fn buffers_mut_lends_every_buffer_at_once() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return,
    };
    let mut reducer = ctx.reducer(vec![vec![0.0f32; 2], vec![0.0f32; 3]]).unwrap();
    let mut slices: Vec<&mut [f32]> = reducer
        .buffers_mut()
        .into_iter()
        .map(|b| b.into_slice::<f32>().unwrap())
        .collect();
    slices[0].fill(1.0);
    slices[1].fill(2.0);
    let mut all = reducer.buffers_mut();
    assert_eq!(all[1].dtype(), DType::Float32);
    assert_eq!(all[1].len(), 3);
    assert!(all[1].as_mut_slice::<f64>().is_none());
    assert_eq!(all[0].as_slice::<f32>(), Some(&[1.0f32, 1.0][..]));
    reducer.mark_ready(0).unwrap();
    reducer.mark_ready(1).unwrap();
    reducer.finalize().unwrap();
    assert_eq!(reducer.buffer::<f32>(1).unwrap(), &[2.0, 2.0, 2.0]);
}

#[test]
fn wrong_index_or_type_is_invalid_argument() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return,
    };
    let mut reducer = ctx.reducer(vec![vec![0.0f64; 2]]).unwrap();
    let err = reducer.buffer::<f32>(0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("Float64"), "{err}");
    let err = reducer.buffer_mut::<f64>(1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("outside"), "{err}");
    let err = reducer.mark_ready(1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    reducer.mark_ready(0).unwrap();
    let err = reducer.mark_ready(0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{err}");
    reducer.finalize().unwrap();
    reducer.mark_ready(0).unwrap(); // a new iteration
    reducer.finalize().unwrap();
}

#[test]
fn bad_options_and_buffers_are_invalid_argument() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return,
    };
    let one = || vec![vec![1.0f32; 2]];
    let cases: Vec<(&str, ddpspawn::Result<Reducer>)> = vec![
        (
            "unknown hook",
            ReducerBuilder::new().comm_hook("bogus").build(&ctx, one()),
        ),
        (
            "NUL in the hook",
            ReducerBuilder::new().comm_hook("fp16\0").build(&ctx, one()),
        ),
        (
            "PowerSGD rank 0",
            ReducerBuilder::new()
                .comm_hook("powersgd")
                .powersgd_rank(0)
                .build(&ctx, one()),
        ),
        (
            "start iteration past i32",
            ReducerBuilder::new()
                .powersgd_start_iteration(u32::MAX)
                .build(&ctx, one()),
        ),
        (
            "zero cap",
            ReducerBuilder::new().bucket_cap_mb(0.0).build(&ctx, one()),
        ),
        (
            "NaN first cap",
            ReducerBuilder::new()
                .first_bucket_cap_mb(f64::NAN)
                .build(&ctx, one()),
        ),
        ("no buffers", ctx.reducer(Vec::<Vec<f64>>::new())),
        ("an empty buffer", ctx.reducer(vec![vec![1i32], vec![]])),
    ];
    for (what, result) in cases {
        let err = result.expect_err(what);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{what}: {err}");
        assert!(!err.message().is_empty(), "{what}");
    }
    let err = ReducerBuilder::new()
        .comm_hook("bogus")
        .build(&ctx, one())
        .unwrap_err();
    assert!(err.message().contains("bogus"), "{err}");
    for hook in ["allreduce", "fp16", "bf16", "powersgd"] {
        let mut reducer = ReducerBuilder::new()
            .comm_hook(hook)
            .build(&ctx, one())
            .unwrap_or_else(|e| panic!("{hook}: {e}"));
        reducer.mark_ready(0).unwrap();
        reducer.finalize().unwrap();
    }
}

#[test]
fn bucket_caps_decide_the_bucket_count() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return,
    };
    let four = || vec![vec![0.0f32; 1000]; 4]; // 4000 bytes each
    let count = |builder: ReducerBuilder| builder.build(&ctx, four()).unwrap().bucket_count();
    assert_eq!(count(ReducerBuilder::new()), 1);
    assert_eq!(
        count(
            ReducerBuilder::new()
                .bucket_cap_mb(1e-6)
                .first_bucket_cap_mb(1e-6)
        ),
        4
    );
    // The first bucket closes after 2 buffers; the other 2 share the next.
    assert_eq!(
        count(ReducerBuilder::new().first_bucket_cap_mb(7000.0 / (1 << 20) as f64)),
        2
    );
}

#[test]
fn no_sync_guard_restores_the_previous_setting() {
    let ctx = match solo() {
        Some(ctx) => ctx,
        None => return,
    };
    let mut reducer = ctx.reducer(vec![vec![0.0f64; 2]]).unwrap();
    {
        let mut outer = reducer.no_sync().unwrap();
        assert!(!outer.sync_enabled());
        {
            let inner = outer.no_sync().unwrap();
            assert!(!inner.sync_enabled());
        }
        assert!(!outer.sync_enabled()); // still accumulating
        outer.buffer_mut::<f64>(0).unwrap()[0] += 1.0;
        outer.mark_ready(0).unwrap();
        outer.mark_ready(0).unwrap(); // nothing is tracked under no_sync
        outer.finalize().unwrap();
    }
    assert!(reducer.sync_enabled());
    {
        let mut off = reducer.no_sync_if(false).unwrap(); // a conditional no_sync, flag off
        assert!(off.sync_enabled());
        assert!(!off.no_sync_if(true).unwrap().sync_enabled());
        assert!(off.sync_enabled());
    }
    assert!(reducer.sync_enabled());
    reducer.set_sync(false).unwrap();
    assert!(!reducer.sync_enabled());
    reducer.set_sync(true).unwrap();
    reducer.mark_ready(0).unwrap();
    reducer.finalize().unwrap();
    assert_eq!(reducer.buffer::<f64>(0).unwrap(), &[1.0, 0.0]);
}

// -- between processes ----------------------------------------------------------

#[test]
fn means_two_ranks() {
    // Default caps: one bucket per element type (4); tiny caps: many.
    assert_eq!(reducer_case(2, "means"), "means ok world=2 buckets=4/7");
}

#[test]
fn means_four_ranks() {
    assert_eq!(reducer_case(4, "means"), "means ok world=4 buckets=4/7");
}

#[test]
fn find_unused_parameters_two_ranks() {
    assert_eq!(reducer_case(2, "unused"), "unused ok world=2");
}

#[test]
fn find_unused_parameters_four_ranks() {
    assert_eq!(reducer_case(4, "unused"), "unused ok world=4");
}

#[test]
fn borrowed_tensors_keep_their_shapes_and_powersgd_compresses() {
    // 528 gradient elements sent as 64: rank-1 factors of the 32x16 weight
    // (32 + 16) and the bias of 16.
    assert_eq!(
        reducer_case(2, "tensors"),
        "tensors ok world=2 sent=64 dense=528"
    );
}

#[test]
fn no_sync_accumulation_two_ranks() {
    assert_eq!(reducer_case(2, "no-sync"), "no-sync ok world=2");
}

#[test]
fn no_sync_accumulation_four_ranks() {
    assert_eq!(reducer_case(4, "no-sync"), "no-sync ok world=4");
}

#[test]
fn comm_hooks_two_ranks() {
    let summary = reducer_case(2, "hooks");
    eprintln!("{summary}");
    assert!(summary.starts_with("hooks ok "), "{summary}");
}

#[test]
fn a_comm_hook_written_in_rust_sparsifies_and_converges() {
    let summary = reducer_case(2, "topk");
    assert!(
        summary.starts_with("topk ok world=2 sent=19200 dense=76800"),
        "{summary}"
    );
}

#[test]
fn bad_options_in_workers_are_invalid_argument() {
    let want = ["InvalidArgument"; 8].join(" ");
    assert_eq!(reducer_case(2, "bad-options"), want);
}
