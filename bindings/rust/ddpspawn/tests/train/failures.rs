//! The tests of `tests/train.rs` that expect an error: bad inputs refused
//! before any rank starts, and a rank's failure named with the report.

use std::fs;
use std::path::Path;

use ddpspawn::{Error, ErrorKind, Trainer};

use crate::common;
use crate::support::{
    data, expect_invalid, ok, script_without_training_step, trainer, write_npy, Rng,
};
use crate::{MLP, NPROCS};

pub(crate) fn bad_inputs_fail_before_any_rank(dir: &Path) {
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

pub(crate) fn nul_and_reserved_keys(dir: &Path) {
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
pub(crate) fn a_failed_rank_is_named_with_the_report(dir: &Path) {
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

pub(crate) fn checkpoint_of_another_model_is_invalid_argument(dir: &Path) {
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
