//! A tch-rs `nn::Sequential` trained on the handwritten digits with 2 ranks: each rank takes every
//! other training row, `DistributedDataParallel` averages the gradients after each backward pass,
//! and rank 0 reports the accuracy on the held-out rows.
//!
//! `cargo run --release --example digits -- DIR` (DIR holds tools/fetch_digits' train.csv and
//! test.csv).

use ddpspawn::{Context, Launcher, ReducerBuilder};
use ddpspawn_tch::DistributedDataParallel;
use tch::nn::{self, Module, OptimizerConfig};

mod common;
use tch::Tensor;

const RANKS: usize = 2;
const EPOCHS: i64 = 30;
const BATCH: i64 = 32; // per rank

fn work(dir: &str) -> ddpspawn::Result<()> {
    let ctx = Context::from_env()?;
    tch::manual_seed(ctx.rank() as i64); // rank 0's weights reach everyone anyway
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let net = common::digits_net(&vs);
    let mut ddp = DistributedDataParallel::new(&ctx, &vs, &ReducerBuilder::new())?;
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.05)
    .expect("sgd");
    let (x, y) = common::read_csv(&format!("{dir}/train.csv"));
    // This rank's rows: every RANKS-th, from its rank, trimmed to a whole number of batches so
    // that every rank runs the same number of steps.
    let mine = Tensor::arange_start_step(
        ctx.rank() as i64,
        x.size()[0],
        RANKS as i64,
        tch::kind::INT64_CPU,
    );
    let steps = mine.size()[0] / BATCH;
    for epoch in 0..EPOCHS {
        tch::manual_seed(epoch); // the same shuffle on every rank
        let order = mine.index_select(0, &Tensor::randperm(mine.size()[0], tch::kind::INT64_CPU));
        for step in 0..steps {
            let rows = order.narrow(0, step * BATCH, BATCH);
            ddp.zero_grad(); // in place: no copy in sync_gradients
            let loss = net
                .forward(&x.index_select(0, &rows))
                .cross_entropy_for_logits(&y.index_select(0, &rows));
            loss.backward();
            ddp.sync_gradients()?;
            assert_eq!(
                ddp.copied(),
                0,
                "the reducer worked on the gradients themselves"
            );
            opt.step();
        }
    }
    if ctx.rank() == 0 {
        let (test_x, test_y) = common::read_csv(&format!("{dir}/test.csv"));
        let accuracy = tch::no_grad(|| net.forward(&test_x).accuracy_for_logits(&test_y));
        let text = format!("{:.4} {}", accuracy.double_value(&[]), test_y.size()[0]);
        ddpspawn::set_result(text.as_bytes())?;
    }
    Ok(())
}

fn main() -> ddpspawn::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "data/digits".to_string());
    if ddpspawn::is_worker() {
        return work(&dir);
    }
    let report = Launcher::new(RANKS).spawn_current_exe([dir.as_str()])?;
    let result =
        String::from_utf8(report.result().expect("rank 0 reports").to_vec()).expect("utf-8");
    let (accuracy, rows) = result.split_once(' ').expect("accuracy rows");
    println!("digits, {RANKS} ranks, {EPOCHS} epochs: held-out accuracy {accuracy} on {rows} rows");
    Ok(())
}
