//! The Fabric conformance loop from Rust: the loop of tests/fabric/fabric_main's "train" mode (4
//! SGD steps with momentum of 2 micro-batches each, the first under `no_backward_sync`, gradients
//! clipped to norm 0.05; each of 2 ranks trains on its half of every batch of 16 rows), from the
//! C++ program's initial weights, compared with the C++ program's final ones; then each side's
//! final checkpoint (C++'s `Fabric::Save`, Rust's `Fabric::save`) is loaded by `Fabric::load` and
//! compared with them too.
//! `fabric_conformance DIR`: DIR holds `fabric_main train DIR`'s initial.txt and weights.txt (the
//! parameters flattened in order, one value a line). Prints the largest difference, how far the
//! weights moved, and how far one process trained on rank 0's half of every batch ends from the
//! C++ weights (the comparison can fail); exits 1 unless the weights are bit-equal.

use ddpspawn_tch::Fabric;
use std::error::Error;
use tch::nn::{self, OptimizerConfig};
use tch::{Kind, Tensor};

const STEPS: i64 = 4;
const ROWS: i64 = 16;
const MAX_NORM: f64 = 0.05;

/// Linear(4, 8), Tanh, Linear(8, 1), from `initial` (weight then bias of each layer).
struct Net {
    layers: Vec<(Tensor, Tensor)>,
}

impl Net {
    fn new(vs: &nn::VarStore, initial: &[f32]) -> Net {
        let mut rest = initial;
        let mut take = |path: nn::Path, name: &str, shape: &[i64]| {
            let count = shape.iter().product::<i64>() as usize;
            let (mine, others) = rest.split_at(count);
            rest = others;
            path.var_copy(name, &Tensor::from_slice(mine).view(shape))
        };
        // Named as LibTorch's Sequential names them ("0.weight", "2.bias"), so that checkpoints
        // of either side load into the other.
        let layers = [("0", 4, 8), ("2", 8, 1)]
            .into_iter()
            .map(|(name, inputs, outputs)| {
                let weight = take(vs.root() / name, "weight", &[outputs, inputs]);
                (weight, take(vs.root() / name, "bias", &[outputs]))
            })
            .collect();
        Net { layers }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let (w1, b1) = &self.layers[0];
        let (w2, b2) = &self.layers[1];
        x.linear(w1, Some(b1)).tanh().linear(w2, Some(b2))
    }

    fn flat(&self) -> Vec<f32> {
        let mut values = Vec::new();
        for (weight, bias) in &self.layers {
            for tensor in [weight, bias] {
                values.extend(Vec::<f32>::try_from(tensor.detach().flatten(0, -1)).expect("f32"));
            }
        }
        values
    }
}

/// Batch `step`'s micro-batch `micro`: 16 rows drawn as the C++ program draws them.
fn inputs(step: i64, micro: i64) -> Tensor {
    tch::manual_seed(100 * step + micro);
    Tensor::randn([ROWS, 4], tch::kind::FLOAT_CPU)
}

fn loss(net: &Net, x: &Tensor) -> Tensor {
    (net.forward(x) - x.sum_dim_intlist(1, true, None::<Kind>))
        .square()
        .mean(None::<Kind>)
}

/// The loop on 2 ranks: rank 0's parameters, one value a line.
fn fabric_loop(fabric: &Fabric, initial: &[f32], dir: &str) -> Result<String, Box<dyn Error>> {
    let vs = nn::VarStore::new(fabric.device());
    let net = Net::new(&vs, initial);
    let mut model = fabric.setup(&vs)?;
    let mut optimizer = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.1)?;
    let half = ROWS / fabric.world_size() as i64;
    let first = fabric.global_rank() as i64 * half;
    for step in 0..STEPS {
        model.zero_grad();
        for micro in 0..2 {
            fabric.no_backward_sync(&mut model, micro == 0, |model| {
                let x = inputs(step, micro).narrow(0, first, half);
                fabric.backward(model, &loss(&net, &x))
            })??;
        }
        fabric.clip_gradients(&model, MAX_NORM, 2.0)?;
        optimizer.step();
    }
    fabric.save(format!("{dir}/rust.ckpt"), &vs, STEPS)?;
    Ok(lines(&net.flat()))
}

/// One value a line.
fn lines(values: &[f32]) -> String {
    let text: Vec<String> = values.iter().map(f32::to_string).collect();
    text.join("\n")
}

/// The step and the parameters of the checkpoint at `path`, loaded by `Fabric::load` (in a rank)
/// into a fresh network.
fn load(fabric: &Fabric, path: &str) -> Result<String, Box<dyn Error>> {
    let vs = nn::VarStore::new(fabric.device());
    let net = Net::new(&vs, &[0.0; 49]);
    let step = fabric.load(path, &vs)?;
    Ok(format!("{step}\n{}", lines(&net.flat())))
}

/// The same loop in one process on `rows` rows of each batch from `first`.
fn alone(initial: &[f32], first: i64, rows: i64) -> Result<Vec<f32>, Box<dyn Error>> {
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let net = Net::new(&vs, initial);
    let mut optimizer = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.1)?;
    for step in 0..STEPS {
        optimizer.zero_grad();
        for micro in 0..2 {
            loss(&net, &inputs(step, micro).narrow(0, first, rows)).backward();
        }
        optimizer.clip_grad_norm(MAX_NORM);
        optimizer.step();
    }
    Ok(net.flat())
}

fn read_values(path: &str) -> Result<Vec<f32>, Box<dyn Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    Ok(text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?)
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "as many parameters");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: fabric_conformance DIR")?;
    let initial = read_values(&format!("{dir}/initial.txt"))?;
    if let Some(path) = std::env::args().nth(2) {
        // A job that loads the checkpoint at `path` (the ranks rerun this program with it).
        println!("{}", Fabric::new(2).launch(|fabric| load(fabric, &path))?);
        return Ok(());
    }
    let rust = Fabric::new(2).launch(|fabric| fabric_loop(fabric, &initial, &dir))?;
    let rust: Vec<f32> = rust
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let cpp = read_values(&format!("{dir}/weights.txt"))?;
    let difference = largest_difference(&rust, &cpp);
    let moved = largest_difference(&cpp, &initial);
    let half_alone = largest_difference(&alone(&initial, 0, ROWS / 2)?, &cpp);
    println!(
        "fabric conformance, C++ and Rust, 2 ranks: largest difference {difference:e} (the \
         weights moved by {moved:e}; rank 0's half alone ends {half_alone:e} away)"
    );
    if moved < 1e-3 || half_alone < 1e-4 {
        return Err("the loop does not tell data-parallel training from one rank's".into());
    }
    if difference != 0.0 {
        return Err(format!("the Rust loop's weights differ from C++'s by {difference:e}").into());
    }
    // Each side's final checkpoint, loaded from Rust: the C++ program's (Fabric::Save) and the
    // Rust loop's (Fabric::save), each in a job of its own.
    for (side, file) in [("C++", "final.ckpt"), ("Rust", "rust.ckpt")] {
        let out = std::process::Command::new(std::env::current_exe()?)
            .args([dir.as_str(), &format!("{dir}/{file}")])
            .output()?;
        let text = String::from_utf8(out.stdout)?;
        let (step, values) = text.split_once('\n').ok_or_else(|| {
            format!(
                "loading {file} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        let loaded: Vec<f32> = values
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let loaded_difference = largest_difference(&loaded, &cpp);
        println!("{side}'s checkpoint {file}, loaded from Rust: step {step}, largest difference {loaded_difference:e}");
        if step != STEPS.to_string() || loaded_difference != 0.0 {
            return Err(format!("{file} did not load as saved").into());
        }
    }
    Ok(())
}
