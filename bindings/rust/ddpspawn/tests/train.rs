//! Training runs through `Trainer` (ddpspawn_run): real fits, validations and
//! predictions with 2 ranks on small data the tests write themselves, and
//! bad inputs that fail before any rank starts. This binary has its own
//! `main` (`harness = false` in Cargo.toml): the library forks the ranks from
//! the calling process, which must not have libtest's test threads running
//! beside it. Arguments that do not start with `-` filter tests by name.
//!
//! The runs that succeed are here; the helpers are in `train/support.rs`, the
//! tests that expect an error in `train/failures.rs`.

mod common;
#[path = "train/failures.rs"]
mod failures;
#[path = "train/support.rs"]
mod support;

use std::fs;
use std::path::Path;

use ddpspawn::{Data, RunResult, Trainer};

use failures::{
    a_failed_rank_is_named_with_the_report, bad_inputs_fail_before_any_rank,
    checkpoint_of_another_model_is_invalid_argument, nul_and_reserved_keys,
};
use support::{
    close, compare_checkpoints, data, expect_invalid, ok, python_with_torch, samples, trainer,
    write_csv, write_npy,
};

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
        (
            "full_shard_keeps_each_ranks_rows",
            full_shard_keeps_each_ranks_rows,
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
    common::run_tests_in_dirs("train", tests);
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

/// Adam on the MLP for 2 epochs, plain and with `option` set to `value`: the
/// two results, whose epoch losses must be bit-equal.
fn fit_adam_plain_and_with(
    dir: &Path,
    option: &str,
    value: impl std::fmt::Display + Copy,
) -> (RunResult, RunResult) {
    let (train, _) = data(dir);
    let adam = |sub: &str| {
        trainer(&dir.join(sub), MLP)
            .option("optimizer", "adam")
            .option("lr", 0.01)
            .option("momentum", 0)
            .option("max_epochs", 2)
    };
    let plain = ok(adam("plain").fit(&train));
    let sharded = ok(adam("sharded").option(option, value).fit(&train));
    let (p, s) = (
        plain.metric("train_loss_epoch").unwrap(),
        sharded.metric("train_loss_epoch").unwrap(),
    );
    assert_eq!(p.to_bits(), s.to_bits(), "unsharded {p}, sharded {s}");
    (plain, sharded)
}

/// A result's comma-separated figure by rank.
fn by_rank(result: &RunResult, key: &str) -> Vec<u64> {
    let text = result.get(key).unwrap();
    text.split(',').map(|b| b.parse().unwrap()).collect()
}

/// ZeRO stage 1 from Rust: each rank holds its shard of Adam's state, and
/// training is bit-equal to unsharded Adam.
fn zero_redundancy_optimizer_shards_the_state(dir: &Path) {
    let (plain, sharded) = fit_adam_plain_and_with(dir, "zero_redundancy_optimizer", true);
    let unsharded = by_rank(&plain, "optimizer_state_bytes");
    let shards = by_rank(&sharded, "optimizer_state_bytes");
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
}

/// ZeRO stage 3 from Rust: each rank keeps its rows of the parameters (and
/// of Adam's state), and training is bit-equal to unsharded Adam.
fn full_shard_keeps_each_ranks_rows(dir: &Path) {
    let (plain, sharded) = fit_adam_plain_and_with(dir, "sharding_strategy", "full_shard");
    // mlp:4,16,3 has 131 parameters: rank 0 keeps 8 of the first layer's 16
    // rows and 2 of the last's 3 (74 elements), rank 1 the rest (57).
    assert_eq!(by_rank(&plain, "parameter_bytes"), vec![131 * 4; NPROCS]);
    assert_eq!(by_rank(&sharded, "parameter_bytes"), vec![74 * 4, 57 * 4]);
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
