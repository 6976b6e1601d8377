//! The check behind ddpspawn-tch: 2 ranks, each with half of a batch and `DistributedDataParallel`
//! averaging the gradients, reach the weights that one process reaches on the whole batch (SGD
//! with momentum, 8 steps, PowerSGD off). Prints the largest difference and exits 1 above 1e-6.
//! With `powersgd` as the argument, the same run through the `"powersgd"` hook (rank 1, from the
//! first step) prints how many gradient elements a step sent against the dense count.

use ddpspawn::{Context, Launcher, ReducerBuilder};
use ddpspawn_tch::DistributedDataParallel;
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Kind, Tensor};

const STEPS: usize = 8;
const ROWS: i64 = 48;

fn model(vs: &nn::VarStore) -> impl Module {
    let root = vs.root();
    nn::seq()
        .add(nn::linear(&root / "a", 6, 32, Default::default()))
        .add_fn(|x| x.tanh())
        .add(nn::linear(&root / "b", 32, 16, Default::default()))
        .add_fn(|x| x.tanh())
        .add(nn::linear(&root / "c", 16, 3, Default::default()))
}

fn data() -> (Tensor, Tensor) {
    tch::manual_seed(42);
    let x = Tensor::randn([ROWS, 6], tch::kind::FLOAT_CPU);
    let y = Tensor::randint(3, [ROWS], tch::kind::INT64_CPU);
    (x, y)
}

/// Trains on `x`, `y` (with `ddp` syncing after each backward, if given);
/// returns the flattened weights in the VarStore's name order.
fn train(
    vs: &nn::VarStore,
    net: &impl Module,
    x: &Tensor,
    y: &Tensor,
    mut ddp: Option<&mut DistributedDataParallel>,
) -> Vec<f32> {
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(vs, 0.1)
    .expect("sgd");
    for _ in 0..STEPS {
        opt.zero_grad(); // to undefined: sync_gradients copies the new gradients in and out
        net.forward(x).cross_entropy_for_logits(y).backward();
        if let Some(ddp) = ddp.as_deref_mut() {
            ddp.sync_gradients().expect("sync");
            assert_eq!(ddp.copied(), 6, "every new gradient was copied in and out");
        }
        opt.step();
    }
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let flat = Tensor::cat(
        &named
            .iter()
            .map(|(_, t)| t.flatten(0, -1))
            .collect::<Vec<_>>(),
        0,
    );
    Vec::<f32>::try_from(&flat.to_kind(Kind::Float)).expect("f32s")
}

fn work(powersgd: bool) -> ddpspawn::Result<()> {
    let ctx = Context::from_env()?;
    let (x, y) = data();
    tch::manual_seed(7);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let net = model(&vs);
    let options = if powersgd {
        ReducerBuilder::new()
            .comm_hook("powersgd")
            .powersgd_start_iteration(0)
    } else {
        ReducerBuilder::new()
            .bucket_cap_mb(0.001)
            .first_bucket_cap_mb(0.001)
    };
    let mut ddp = DistributedDataParallel::new(&ctx, &vs, &options)?;
    let half = ROWS / ctx.world_size() as i64;
    let start = half * ctx.rank() as i64;
    let weights = train(
        &vs,
        &net,
        &x.narrow(0, start, half),
        &y.narrow(0, start, half),
        Some(&mut ddp),
    );
    if ctx.rank() == 0 {
        let (sent, dense) = ddp.reducer().compression()?;
        let mut bytes =
            format!("{} {} {}|", ddp.reducer().bucket_count(), sent, dense).into_bytes();
        bytes.extend(weights.iter().flat_map(|w| w.to_le_bytes()));
        ddpspawn::set_result(&bytes)?;
    }
    Ok(())
}

fn main() -> ddpspawn::Result<()> {
    let powersgd = std::env::args().nth(1).as_deref() == Some("powersgd");
    if ddpspawn::is_worker() {
        return work(powersgd);
    }
    let args: &[&str] = if powersgd { &["powersgd"] } else { &[] };
    let report = Launcher::new(2).spawn_current_exe(args)?;
    let bytes = report.into_result().expect("rank 0 reports");
    let split = bytes.iter().position(|b| *b == b'|').expect("a header");
    let header = String::from_utf8(bytes[..split].to_vec()).expect("utf-8");
    let spawned: Vec<f32> = bytes[split + 1..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let (x, y) = data();
    tch::manual_seed(7);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let net = model(&vs);
    let initial = {
        let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
            .iter()
            .map(|(_, t)| Vec::<f32>::try_from(&t.flatten(0, -1)).expect("f32s"))
            .collect::<Vec<_>>()
            .concat()
    };
    let alone = train(&vs, &net, &x, &y, None);
    let gap = spawned
        .iter()
        .zip(&alone)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let moved = alone
        .iter()
        .zip(&initial)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let mut fields = header.split(' ');
    let buckets = fields.next().unwrap_or("?");
    let (sent, dense) = (fields.next().unwrap_or("?"), fields.next().unwrap_or("?"));
    if powersgd {
        println!("powersgd: sent {sent} of {dense} gradient elements per step; weights {gap:.1e} from one process");
        return Ok(());
    }
    println!(
        "2 ranks vs 1 process, {STEPS} steps, {buckets} buckets: max weight difference {gap:.1e} (training moved them {moved:.2})"
    );
    if !(gap < 1e-6 && moved > 1e-2) || spawned.len() != alone.len() {
        eprintln!("MISMATCH");
        std::process::exit(1);
    }
    Ok(())
}
