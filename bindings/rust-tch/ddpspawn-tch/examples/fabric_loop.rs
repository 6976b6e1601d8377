//! `plain_loop.rs` on 2 ranks under `ddpspawn_tch::Fabric`: each rank trains on its share of every
//! epoch, and the gradients' mean over the ranks updates every rank's copy. Rank 0's held-out
//! accuracy comes back to the launching process.
//! `cargo run --release --example fabric_loop -- DIR` (DIR holds tools/fetch_digits' CSV files).

use std::error::Error;
use tch::nn;
use tch::nn::{Module, OptimizerConfig};

mod common;

fn train(fabric: &ddpspawn_tch::Fabric, dir: &str) -> Result<String, Box<dyn Error>> {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let net = common::digits_net(&vs);
    let mut model = fabric.setup(&vs)?;
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.05)?;
    let (x, y) = common::read_csv(&format!("{dir}/train.csv"));
    for epoch in 0..20 {
        tch::manual_seed(epoch); // a reproducible shuffle
        let order = fabric.epoch_indices(x.size()[0] as usize, epoch as usize)?;
        for rows in order.split(32, 0) {
            opt.zero_grad();
            let loss = net
                .forward(&x.index_select(0, &rows))
                .cross_entropy_for_logits(&y.index_select(0, &rows));
            fabric.backward(&mut model, &loss)?;
            opt.step();
        }
    }
    Ok(common::test_accuracy(&net, dir))
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = common::digits_dir();
    let result = ddpspawn_tch::Fabric::new(2).launch(|fabric| train(fabric, &dir))?;
    println!("{result}");
    Ok(())
}
