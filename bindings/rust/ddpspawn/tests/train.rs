//! Training runs through `Trainer` (ddpspawn_run): real fits, validations and
//! predictions with 2 ranks on small data the tests write themselves, and
//! bad inputs that fail before any rank starts. This binary has its own
//! `main` (`harness = false` in Cargo.toml): the library forks the ranks from
//! the calling process, which must not have libtest's test threads running
//! beside it. Arguments that do not start with `-` filter tests by name.

mod common;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ddpspawn::{Data, Error, ErrorKind, RunResult, Trainer};

const MLP: &str = "mlp:4,16,3";
const NPROCS: usize = 2;

/// A test: it gets a fresh directory of its own.
type Test = fn(&Path);

fn main() {
    let tests: &[(&str, Test)] = &[
        ("fit_learns_and_checkpoints", fit_learns_and_checkpoints),
        ("resume_continues", resume_continues),
        (
            "zero_redundancy_optimizer_shards_the_state",
            zero_redundancy_optimizer_shards_the_state,
        ),
        ("post_local_sgd_steps_locally", post_local_sgd_steps_locally),
        (
            "validate_and_test_from_checkpoint",
            validate_and_test_from_checkpoint,
        ),
        ("predict_in_dataset_order", predict_in_dataset_order),
        ("npy_data", npy_data),
        (
            "bad_inputs_fail_before_any_rank",
            bad_inputs_fail_before_any_rank,
        ),
        ("nul_and_reserved_keys", nul_and_reserved_keys),
        (
            "a_failed_rank_is_named_with_the_report",
            a_failed_rank_is_named_with_the_report,
        ),
        (
            "callbacks_stop_early_and_keep_the_best",
            callbacks_stop_early_and_keep_the_best,
        ),
        (
            "checkpoint_of_another_model_is_invalid_argument",
            checkpoint_of_another_model_is_invalid_argument,
        ),
    ];
    let root = common::temp_path("train");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).expect("create the test directory");
    let outcome = common::run_tests(tests, |name, test| {
        let dir = root.join(name);
        fs::create_dir_all(&dir).expect("create a test directory");
        test(&dir);
    });
    if outcome.failed.is_empty() {
        let _ = fs::remove_dir_all(&root);
    }
    common::finish(&outcome, &format!(" (files kept in {})", root.display()));
}

// --- Data ---------------------------------------------------------------------

/// A small deterministic generator (xorshift64*), uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A learnable 3-class rule of 4 features.
fn class_of(x: &[f64]) -> i64 {
    let s = x[0] + x[1] - 0.5 * x[2];
    if s < -0.4 {
        0
    } else if s < 0.4 {
        1
    } else {
        2
    }
}

/// `n` samples of 4 features in [-1, 1) and their classes.
fn samples(n: usize, seed: u64) -> Vec<([f64; 4], i64)> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..n)
        .map(|_| {
            let x = [rng.uniform(), rng.uniform(), rng.uniform(), rng.uniform()];
            // Features as the CSV holds them, so the label matches them.
            let x = x.map(|v| (v * 1e6).round() / 1e6);
            (x, class_of(&x))
        })
        .collect()
}

fn write_csv(path: &Path, rows: &[([f64; 4], i64)]) {
    let mut text = String::new();
    for (x, label) in rows {
        text += &format!("{:.6},{:.6},{:.6},{:.6},{label}\n", x[0], x[1], x[2], x[3]);
    }
    fs::write(path, text).expect("write a CSV");
}

/// A NumPy 1.0 file: the header, padded to a multiple of 64 bytes, then `data`.
fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    fs::write(path, bytes).expect("write a .npy");
}

/// train.csv (200 samples) and val.csv (100) in `dir`.
fn data(dir: &Path) -> (PathBuf, PathBuf) {
    let (train, val) = (dir.join("train.csv"), dir.join("val.csv"));
    write_csv(&train, &samples(200, 1));
    write_csv(&val, &samples(100, 2));
    (train, val)
}

/// The settings every run of the built-in classifier here shares.
fn trainer(dir: &Path, model: &str) -> Trainer {
    Trainer::new(model)
        .nprocs(NPROCS)
        .option("lr", 0.1)
        .option("momentum", 0.9)
        .option("batch_size", 16)
        .option("seed", 0)
        .option("progress", false)
        .timeout(Duration::from_secs(240))
        .default_root_dir(dir)
}

fn ok(result: ddpspawn::Result<RunResult>) -> RunResult {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-12
}

// --- Tests --------------------------------------------------------------------

fn fit_learns_and_checkpoints(dir: &Path) {
    let (train, val) = data(dir);
    let one = ok(trainer(&dir.join("one"), MLP)
        .val(&val)
        .option("max_epochs", 1)
        .fit(&train));
    let ten = ok(trainer(&dir.join("ten"), MLP)
        .val(&val)
        .option("max_epochs", 10)
        .fit(&train));
    assert_eq!((one.epoch(), ten.epoch()), (Some(1), Some(10)));
    // 200 samples, 2 ranks, 16 per rank: 7 steps an epoch.
    assert_eq!((one.global_step(), ten.global_step()), (Some(7), Some(70)));
    // The 2 forked ranks meet in shared memory: their arrivals are timed, at
    // 7 gradient all-reduces an epoch at least.
    assert_eq!(ten.get("straggler.measured_by"), Some("shared memory"));
    let timed: u64 = ten.get("straggler.collectives").unwrap().parse().unwrap();
    assert!(timed >= 70, "{:?}", ten.straggler());
    // The straggler is the rank that arrived last most often: its count is
    // the larger of the two, and the summary names it.
    let straggler = ten.straggler_rank().unwrap();
    let arrived_last = |rank: usize| -> u64 {
        let key = format!("straggler.rank{rank}.arrived_last");
        ten.get(&key).unwrap().parse().unwrap()
    };
    assert!(
        arrived_last(straggler) >= arrived_last(1 - straggler),
        "{:?}",
        ten.straggler()
    );
    assert!(
        ten.straggler()
            .unwrap()
            .starts_with(&format!("rank {straggler} arrived last")),
        "{:?}",
        ten.straggler()
    );
    let first = one.metric("train_loss_epoch").unwrap();
    let last = ten.metric("train_loss_epoch").unwrap();
    assert!(last < 0.6 * first, "train_loss_epoch {first} -> {last}");
    assert!(ten.metric("val_loss").unwrap() < one.metric("val_loss").unwrap());
    assert!(ten.metric("val_accuracy").unwrap() > 0.85, "{}", ten.text());
    let checkpoint = ten.checkpoint().unwrap();
    assert!(checkpoint.is_file() && fs::metadata(checkpoint).unwrap().len() > 0);
    assert!(checkpoint.starts_with(dir.join("ten")));
    let log = fs::read_to_string(ten.metrics_csv().unwrap()).unwrap();
    assert!(log.starts_with("epoch,step,name,value\n"));
    let losses: Vec<f64> = log
        .lines()
        .filter(|l| l.contains(",train_loss_epoch,"))
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 10);
    assert!(losses[9] < losses[0]);
    assert!(ten.metrics().contains_key("val_accuracy"));
}

fn callbacks_stop_early_and_keep_the_best(dir: &Path) {
    let (train, val) = data(dir);
    let fit = ok(trainer(dir, MLP)
        .val(&val)
        .option("lr", 1e-9)
        .option("max_epochs", 10)
        .option("early_stopping_monitor", "val_loss")
        .option("early_stopping_patience", 2)
        .option("early_stopping_min_delta", 0.01)
        .option("monitor", "val_loss")
        .fit(&train));
    // The first check sets the best val_loss; two more without a 0.01 gain.
    assert_eq!(fit.epoch(), Some(3), "{}", fit.text());
    assert_eq!(fit.stopped_by(), Some("early_stopping"));
    let best = fit.best_model_path().unwrap();
    assert!(best.is_file(), "{}", best.display());
    let name = best.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("epoch=") && name.contains("-val_loss="),
        "{name}"
    );
    let kept: Vec<_> = fs::read_dir(dir.join("checkpoints")).unwrap().collect();
    assert_eq!(kept.len(), 2, "save_top_k 1 beside last.ckpt");
    assert!(fit.best_model_score().unwrap() >= fit.metric("val_loss").unwrap() - 0.01);
}

fn resume_continues(dir: &Path) {
    let (train, val) = data(dir);
    let first = ok(trainer(&dir.join("a"), MLP)
        .val(&val)
        .option("max_epochs", 2)
        .fit(&train));
    // The resumed run writes its checkpoint where the first one is: keep a copy.
    let early = dir.join("after_2_epochs.ckpt");
    fs::copy(first.checkpoint().unwrap(), &early).expect("copy the first checkpoint");
    let resumed = ok(trainer(&dir.join("a"), MLP)
        .val(&val)
        .option("max_epochs", 4)
        .resume_from(first.checkpoint().unwrap())
        .fit(&train));
    assert_eq!((first.epoch(), resumed.epoch()), (Some(2), Some(4)));
    assert_eq!(resumed.global_step(), first.global_step().map(|s| 2 * s));
    // Bit for bit the same as 4 epochs at once (same seed, same threads): the
    // same metrics, and the same tensors in the checkpoint.
    let straight = ok(trainer(&dir.join("b"), MLP)
        .val(&val)
        .option("max_epochs", 4)
        .fit(&train));
    assert_eq!(straight.global_step(), resumed.global_step());
    for name in ["train_loss_epoch", "val_loss", "val_accuracy"] {
        let (r, s) = (
            resumed.metric(name).unwrap(),
            straight.metric(name).unwrap(),
        );
        assert_eq!(
            r.to_bits(),
            s.to_bits(),
            "{name}: resumed {r}, straight {s}"
        );
    }
    let python = match python_with_torch() {
        Ok(python) => python,
        Err(why) => {
            common::skip_or_fail(&format!(
                "the checkpoints' tensors are not compared (the metrics were): {why}"
            ));
            return;
        }
    };
    let (resumed_ckpt, straight_ckpt) = (
        resumed.checkpoint().unwrap(),
        straight.checkpoint().unwrap(),
    );
    let same = compare_checkpoints(&python, resumed_ckpt, straight_ckpt);
    let differ: Vec<_> = same.iter().filter(|(_, same)| !same).collect();
    assert!(
        differ.is_empty(),
        "resumed ({}) and straight ({}) checkpoints differ in {differ:?}",
        resumed_ckpt.display(),
        straight_ckpt.display()
    );
    // The weights (model.*) and every rank's RNG state (rng.cpu.<rank>).
    let names: Vec<&str> = same.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"model.0.weight"), "{names:?}");
    assert!(names.contains(&"rng.cpu.1"), "{names:?}");
    // And it did train on after resuming.
    let weights_moved = compare_checkpoints(&python, &early, resumed_ckpt)
        .into_iter()
        .any(|(name, same)| name.starts_with("model.") && !same);
    assert!(
        weights_moved,
        "the weights after 4 epochs are those after 2"
    );
}

/// ZeRO stage 1 from Rust: each rank holds its shard of Adam's state, and
/// training is bit-equal to unsharded Adam.
fn zero_redundancy_optimizer_shards_the_state(dir: &Path) {
    let (train, _) = data(dir);
    let adam = |sub: &str| {
        trainer(&dir.join(sub), MLP)
            .option("optimizer", "adam")
            .option("lr", 0.01)
            .option("momentum", 0)
            .option("max_epochs", 2)
    };
    let plain = ok(adam("plain").fit(&train));
    let sharded = ok(adam("sharded")
        .option("zero_redundancy_optimizer", true)
        .fit(&train));
    let bytes = |result: &RunResult| -> Vec<u64> {
        let text = result.get("optimizer_state_bytes").unwrap();
        text.split(',').map(|b| b.parse().unwrap()).collect()
    };
    let (unsharded, shards) = (bytes(&plain), bytes(&sharded));
    assert_eq!(unsharded.len(), NPROCS);
    assert!(
        unsharded.iter().all(|&b| b == unsharded[0]),
        "{unsharded:?}"
    );
    assert_eq!(shards.iter().sum::<u64>(), unsharded[0], "{shards:?}");
    assert!(
        shards.iter().all(|&b| 0 < b && b < unsharded[0]),
        "{shards:?}"
    );
    let (p, s) = (
        plain.metric("train_loss_epoch").unwrap(),
        sharded.metric("train_loss_epoch").unwrap(),
    );
    assert_eq!(p.to_bits(), s.to_bits(), "unsharded {p}, sharded {s}");
}

/// Post-local SGD from Rust: local steps train differently from DDP, the
/// node's gradient mean (one node: every rank) trains exactly as DDP, and
/// the hook without its averaging period is refused before any rank.
fn post_local_sgd_steps_locally(dir: &Path) {
    let (train, _) = data(dir);
    let sgd = |sub: &str| {
        trainer(&dir.join(sub), MLP)
            .option("momentum", 0)
            .option("max_epochs", 2)
    };
    let local_sgd = |sub: &str| {
        sgd(sub)
            .option("ddp_comm_hook", "post_localsgd")
            .option("post_localsgd_start_iteration", 2)
            .option("model_averaging_period", 2)
    };
    let plain = ok(sgd("plain").fit(&train));
    let local = ok(local_sgd("local")
        .option("post_local_gradient_allreduce", false)
        .fit(&train));
    let within_node = ok(local_sgd("node").fit(&train));
    let loss = |r: &RunResult| r.metric("train_loss_epoch").unwrap();
    assert_eq!(
        loss(&plain).to_bits(),
        loss(&within_node).to_bits(),
        "DDP {}, the node's mean {}",
        loss(&plain),
        loss(&within_node)
    );
    assert_ne!(loss(&plain), loss(&local), "local steps trained as DDP");
    expect_invalid(
        sgd("refused")
            .option("ddp_comm_hook", "post_localsgd")
            .fit(&train),
        "needs model_averaging_period",
    );
}

fn validate_and_test_from_checkpoint(dir: &Path) {
    let (train, val) = data(dir);
    let fit = ok(trainer(dir, MLP)
        .val(&val)
        .option("max_epochs", 3)
        .fit(&train));
    let evaluator = Trainer::new(MLP)
        .nprocs(NPROCS)
        .default_root_dir(dir.join("eval"))
        .checkpoint(fit.checkpoint().unwrap());
    let validated = ok(evaluator.validate(&val));
    assert_eq!(validated.metrics().len(), 2, "{}", validated.text());
    for name in ["val_loss", "val_accuracy"] {
        let (v, f) = (validated.metric(name).unwrap(), fit.metric(name).unwrap());
        assert!(close(v, f, 1e-6), "{name}: validate {v}, fit {f}");
    }
    assert_eq!(validated.checkpoint(), None);
    let tested = ok(evaluator.test(&val));
    let test_loss = tested.metric("test_loss").unwrap();
    assert!(close(
        test_loss,
        validated.metric("val_loss").unwrap(),
        1e-6
    ));
    assert!(tested.metric("test_accuracy").is_some());
}

fn predict_in_dataset_order(dir: &Path) {
    let (train, _) = data(dir);
    let fit = ok(trainer(dir, MLP).option("max_epochs", 10).fit(&train));
    // 101 rows: not a multiple of the ranks.
    let rows = samples(101, 7);
    let fresh = dir.join("fresh.csv");
    write_csv(&fresh, &rows);
    let result = ok(Trainer::new(MLP)
        .nprocs(NPROCS)
        .default_root_dir(dir.join("predict"))
        .checkpoint(fit.checkpoint().unwrap())
        .predict(&fresh));
    assert_eq!(result.count(), Some(101));
    assert!(result.predictions_path().unwrap().is_file());
    let predictions = result.read_predictions().unwrap();
    assert_eq!(predictions.len(), 101);
    let mut correct = 0;
    for (row, (_, label)) in predictions.iter().zip(&rows) {
        assert_eq!(row.len(), 1);
        let class = row[0];
        assert!(
            class == class.trunc() && (0.0..3.0).contains(&class),
            "{row:?}"
        );
        correct += usize::from(class as i64 == *label);
    }
    // Right most of the time only if the order is the dataset's.
    assert!(correct >= 80, "{correct} of 101 right");
}

fn npy_data(dir: &Path) {
    let rows = samples(64, 3);
    let features: Vec<u8> = rows
        .iter()
        .flat_map(|(x, _)| x.iter().flat_map(|v| (*v as f32).to_le_bytes()))
        .collect();
    let labels: Vec<u8> = rows.iter().flat_map(|(_, y)| y.to_le_bytes()).collect();
    let (x, y) = (dir.join("x.npy"), dir.join("y.npy"));
    write_npy(&x, "<f4", &[64, 4], &features);
    write_npy(&y, "<i8", &[64], &labels);
    let fit = ok(trainer(dir, MLP)
        .val(Data::npy(&x, &y))
        .option("max_epochs", 2)
        .fit((&x, &y)));
    assert_eq!(fit.epoch(), Some(2));
    assert!(fit.metric("val_accuracy").is_some());
    let predicted = ok(Trainer::new(MLP)
        .nprocs(NPROCS)
        .default_root_dir(dir)
        .checkpoint(fit.checkpoint().unwrap())
        .predict(Data::npy(&x, &y)));
    assert_eq!(predicted.count(), Some(64));
}

/// A Python with torch, for what only torch does here (script a module, read
/// a checkpoint's tensors). Tried in order: `$DDPSPAWN_PYTHON`, tools/setup's
/// virtual environment (`$DDPSPAWN_VENV`, default /opt/ddpspawn/venv), then
/// `python3` on PATH and /usr/bin/python3. Err says what each one gave.
fn python_with_torch() -> Result<PathBuf, String> {
    let venv = env::var_os("DDPSPAWN_VENV")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/opt/ddpspawn/venv"), PathBuf::from);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(python) = env::var_os("DDPSPAWN_PYTHON").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(python));
    }
    candidates.push(venv.join("bin").join("python3"));
    candidates.push(PathBuf::from("python3"));
    candidates.push(PathBuf::from("/usr/bin/python3"));
    let mut tried = Vec::new();
    for python in candidates {
        match Command::new(&python).args(["-c", "import torch"]).output() {
            Ok(out) if out.status.success() => return Ok(python),
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let last = stderr.lines().last().unwrap_or("").to_string();
                tried.push(format!("{}: {last}", python.display()));
            }
            Err(e) => tried.push(format!("{}: {e}", python.display())),
        }
    }
    Err(format!(
        "no Python with torch (tried {}); set DDPSPAWN_PYTHON to one, or run tools/setup",
        tried.join("; ")
    ))
}

/// Reads two ddpspawn checkpoints with torch (checking a format-2 header's
/// size and CRC-32 first; a format-1 file is the bare archive) and compares
/// their weights (`model.*`) and RNG states (`rng.*`) exactly: each name with
/// whether the two hold the same tensor (a name in one only is not).
const COMPARE_CHECKPOINTS: &str = r#"
import io, sys, zlib, torch

def archive(path):
    data = open(path, "rb").read()
    if data.startswith(b"PK\x03\x04"):
        return data
    header, _, body = data.partition(b"\n")
    magic, crc, size = header.decode().split(" ")
    assert magic == "ddpspawn-checkpoint-2", (path, header)
    assert len(body) == int(size.removeprefix("size=")), (path, header)
    assert zlib.crc32(body) == int(crc.removeprefix("crc32="), 16), (path, header)
    return body

a, b = (torch.jit.load(io.BytesIO(archive(p))).state_dict() for p in sys.argv[1:3])
for name in sorted(n for n in set(a) | set(b) if n.startswith(("model.", "rng."))):
    same = name in a and name in b and torch.equal(a[name], b[name])
    print("same" if same else "differs", name)
"#;

fn compare_checkpoints(python: &Path, a: &Path, b: &Path) -> Vec<(String, bool)> {
    let out = Command::new(python)
        .args(["-c", COMPARE_CHECKPOINTS])
        .args([a, b])
        .output()
        .expect("run Python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "reading {} and {} with torch: {}\n{stdout}{}",
        a.display(),
        b.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|line| match line.split_once(' ') {
            Some(("same", name)) => (name.to_string(), true),
            Some(("differs", name)) => (name.to_string(), false),
            _ => panic!("unexpected line from the comparison: {line:?}"),
        })
        .collect()
}

/// A TorchScript module without training_step, written by Python's torch
/// (torch.jit.script reads the class's source: a file). Err: no Python with
/// torch.
fn script_without_training_step(path: &Path) -> Result<(), String> {
    let python = python_with_torch()?;
    let script = path.with_extension("py");
    let code = "import sys, torch\n\
                class M(torch.nn.Module):\n\
                \x20   def __init__(self):\n\
                \x20       super().__init__()\n\
                \x20       self.linear = torch.nn.Linear(4, 3)\n\
                \x20   def forward(self, x):\n\
                \x20       return self.linear(x)\n\
                torch.jit.script(M()).save(sys.argv[1])\n";
    fs::write(&script, code).expect("write a script");
    let out = Command::new(&python)
        .arg(&script)
        .arg(path)
        .output()
        .expect("run Python");
    assert!(
        out.status.success(),
        "{} {} failed: {}",
        python.display(),
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn expect_invalid(result: ddpspawn::Result<RunResult>, needle: &str) -> Error {
    let err = match result {
        Ok(result) => panic!("expected an error about {needle:?}, got {}", result.text()),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.message().contains(needle), "{needle:?} not in: {err}");
    err
}

fn bad_inputs_fail_before_any_rank(dir: &Path) {
    let (train, _) = data(dir);
    let root = dir.join("never_created");
    let t = |model: &str| trainer(&root, model);

    let missing = dir.join("missing.pt");
    expect_invalid(t(missing.to_str().unwrap()).fit(&train), "missing.pt");

    let corrupt = dir.join("corrupt.pt");
    let mut rng = Rng(99);
    let noise: Vec<u8> = (0..2048)
        .map(|_| (rng.uniform() * 127.0 + 128.0) as u8)
        .collect();
    fs::write(&corrupt, noise).unwrap();
    expect_invalid(
        t(corrupt.to_str().unwrap()).fit(&train),
        "not a TorchScript module",
    );

    let no_step = dir.join("no_step.pt");
    match script_without_training_step(&no_step) {
        Ok(()) => {
            expect_invalid(
                t(no_step.to_str().unwrap()).fit(&train),
                "no method 'training_step'",
            );
        }
        Err(why) => common::skip_or_fail(&format!(
            "the module without training_step is not tested: {why}"
        )),
    }

    // A valid header for (20, 4) float32, then half the data.
    let short = dir.join("short.npy");
    write_npy(&short, "<f4", &[20, 4], &[0u8; 160]);
    let labels = dir.join("labels.npy");
    write_npy(&labels, "<i8", &[20], &[0u8; 160]);
    expect_invalid(t(MLP).fit((&short, &labels)), "short.npy");

    let tiny = dir.join("tiny.csv");
    fs::write(&tiny, "0,0,0,0,1\n1,1,1,1,0\n0,1,0,1,2\n").unwrap();
    expect_invalid(t(MLP).nprocs(4).fit(&tiny), "fewer than the 4 ranks");

    expect_invalid(
        t(MLP).option("max_epohcs", 3).fit(&train),
        "unknown option 'max_epohcs'",
    );
    expect_invalid(
        t(MLP).option("max_epochs", "many").fit(&train),
        "max_epochs",
    );
    expect_invalid(t("mlp:4,16,2").fit(&train), "class labels outside [0, 2)");
    expect_invalid(t("mlp:5,16,3").fit(&train), "4 features");
    expect_invalid(t(MLP).option("start_method", "spawn").fit(&train), "fork");
    expect_invalid(
        t(MLP).checkpoint(dir.join("none.ckpt")).validate(&train),
        "none.ckpt",
    );
    expect_invalid(t(MLP).predict(dir.join("nowhere.csv")), "nowhere.csv");
    expect_invalid(t(MLP).test(&short), "labels");
    assert!(!root.exists(), "a rank ran: {} exists", root.display());
}

fn nul_and_reserved_keys(dir: &Path) {
    let (train, _) = data(dir);
    for (trainer, what) in [
        (Trainer::new("mlp:4,\u{0}16,3"), "model"),
        (Trainer::new(MLP).option("lr", "0.\u{0}1"), "lr"),
        (Trainer::new(MLP).option("bad\0key", 1), "bad"),
        (
            Trainer::new(MLP).default_root_dir("a\0b"),
            "default_root_dir",
        ),
        (Trainer::new(MLP).nprocs(0), "nprocs"),
        (
            Trainer::new(MLP).option("nproc_per_node", 2),
            "Trainer::nprocs",
        ),
        (Trainer::new(MLP).option("data", "x.csv"), "validate"),
        (Trainer::new(MLP).option("x=y", 1), "'='"),
    ] {
        let err = trainer.fit(&train).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.message().contains(what), "{what:?} not in: {err}");
    }
    let err = Trainer::new(MLP).fit("tr\0ain.csv").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.message().contains("NUL"), "{err}");
}

/// Rank 0 cannot write its logs under a file: the error names it, and carries
/// every rank's outcome as a Launcher's does.
fn a_failed_rank_is_named_with_the_report(dir: &Path) {
    let (train, _) = data(dir);
    let err = trainer(dir, MLP)
        .default_root_dir("/dev/null/logs")
        .option("max_epochs", 1)
        .fit(&train)
        .unwrap_err();
    match &err {
        Error::WorkerFailed { rank, report, .. } => {
            assert_eq!(*rank, 0, "{err}");
            let report = report.as_ref().expect("the ranks' report");
            assert_eq!(report.nprocs(), NPROCS, "{err}");
            assert_eq!(report.failed_rank(), Some(0), "{err}");
            let rank0 = report.rank(0).expect("rank 0's outcome");
            assert_eq!(rank0.state, ddpspawn::RankState::Exited(1), "{err}");
            assert!(rank0.error.contains("/dev/null/logs"), "{rank0:?}");
        }
        other => panic!("expected WorkerFailed, got {other:?}"),
    }
}

fn checkpoint_of_another_model_is_invalid_argument(dir: &Path) {
    // The checkpoint's shapes do not fit the model: found before any rank
    // starts, naming the tensor.
    let (train, val) = data(dir);
    let fit = ok(trainer(dir, MLP).option("max_epochs", 1).fit(&train));
    let err = Trainer::new("mlp:4,8,3")
        .nprocs(NPROCS)
        .default_root_dir(dir.join("eval"))
        .checkpoint(fit.checkpoint().unwrap())
        .validate(&val)
        .unwrap_err();
    match &err {
        Error::InvalidArgument { message } => {
            assert!(
                message.contains("has shape [16, 4] in the checkpoint"),
                "{err}"
            );
        }
        other => panic!("expected InvalidArgument, got {other}"),
    }
}
