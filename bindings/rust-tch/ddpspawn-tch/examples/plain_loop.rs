//! A training loop in one process: a tch-rs network on the handwritten digits, SGD with momentum,
//! shuffled batches of 32. `fabric_loop.rs` is the same loop on 2 ranks under `ddpspawn_tch::Fabric`,
//! five lines changed (run_tests.sh counts them below this comment and runs both).
//! `cargo run --release --example plain_loop -- DIR` (DIR holds tools/fetch_digits' CSV files).

use std::error::Error;
use tch::nn;
use tch::nn::{Module, OptimizerConfig};

mod common;

fn train(dir: &str) -> Result<String, Box<dyn Error>> {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let net = common::digits_net(&vs);
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.05)?;
    let (x, y) = common::read_csv(&format!("{dir}/train.csv"));
    for epoch in 0..20 {
        tch::manual_seed(epoch); // a reproducible shuffle
        let order = tch::Tensor::randperm(x.size()[0], tch::kind::INT64_CPU);
        for rows in order.split(32, 0) {
            opt.zero_grad();
            let loss = net
                .forward(&x.index_select(0, &rows))
                .cross_entropy_for_logits(&y.index_select(0, &rows));
            loss.backward();
            opt.step();
        }
    }
    Ok(common::test_accuracy(&net, dir))
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = common::digits_dir();
    let result = train(&dir)?;
    println!("{result}");
    Ok(())
}
