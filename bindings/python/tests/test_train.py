"""Tests of the training entry points (ddpspawn.fit / validate / test /
predict over ddpspawn_run): real runs with 2 forked ranks on small data that
the tests write themselves, and inputs rejected before any process starts."""

import io
import os
import random
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

import ddpspawn
from ddpspawn import _train

NPROCS = 2
MLP = "mlp:4,16,3"


def classes_of(x):
    """A learnable 3-class rule of 4 features."""
    s = x[0] + x[1] - 0.5 * x[2]
    return 0 if s < -0.6 else (1 if s < 0.6 else 2)


def write_classification_csv(path, n=200, seed=0):
    rng = random.Random(seed)
    rows = []
    with open(path, "w") as f:
        for _ in range(n):
            x = [rng.gauss(0.0, 1.0) for _ in range(4)]
            rows.append((x, classes_of(x)))
            f.write(",".join(f"{v:.6f}" for v in x) + f",{classes_of(x)}\n")
    return rows


WEIGHTS = (1.0, -2.0, 0.5, 3.0)
BIAS = 0.25


def write_regression_csv(path, n=200, seed=1):
    rng = random.Random(seed)
    rows = []
    with open(path, "w") as f:
        for _ in range(n):
            x = [round(rng.uniform(-1.0, 1.0), 6) for _ in range(4)]
            y = sum(w * v for w, v in zip(WEIGHTS, x)) + BIAS
            rows.append((x, y))
            f.write(",".join(f"{v:.6f}" for v in x) + f",{y:.6f}\n")
    return rows


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("train_data")
    write_classification_csv(directory / "train.csv", seed=0)
    write_classification_csv(directory / "val.csv", n=100, seed=1)
    write_regression_csv(directory / "reg.csv")
    return directory


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    """One 10-epoch fit of the built-in classifier, shared by several tests."""
    root = tmp_path_factory.mktemp("fit10")
    return ddpspawn.fit(
        MLP,
        data_dir / "train.csv",
        val=data_dir / "val.csv",
        nprocs=NPROCS,
        max_epochs=10,
        lr=0.1,
        momentum=0.9,
        batch_size=16,
        seed=0,
        progress=False,
        default_root_dir=root,
    )


def common(root, **extra):
    options = dict(nprocs=NPROCS, lr=0.1, momentum=0.9, batch_size=16, seed=0, progress=False)
    options.update(default_root_dir=str(root), **extra)
    return options


# --- The built-in MLP --------------------------------------------------------


def test_fit_learns_and_writes_checkpoint_and_metrics(data_dir, trained, tmp_path):
    one = ddpspawn.fit(
        MLP, data_dir / "train.csv", val=data_dir / "val.csv", **common(tmp_path, max_epochs=1)
    )
    assert isinstance(trained, ddpspawn.FitResult)
    assert (one.epoch, trained.epoch) == (1, 10)
    # 200 samples, 2 ranks, 16 per rank: 7 steps an epoch.
    assert (one.global_step, trained.global_step) == (7, 70)
    assert trained.metrics["train_loss_epoch"] < 0.6 * one.metrics["train_loss_epoch"]
    assert trained.metrics["val_loss"] < one.metrics["val_loss"]
    assert trained.metrics["val_accuracy"] > 0.85
    assert os.path.isfile(trained.checkpoint) and os.path.getsize(trained.checkpoint) > 0
    assert trained.values["checkpoint"] == trained.checkpoint
    # metrics.csv: one train_loss_epoch per epoch, falling overall.
    with open(trained.metrics_csv) as f:
        lines = f.read().splitlines()
    assert lines[0] == "epoch,step,name,value"
    losses = [float(l.split(",")[3]) for l in lines[1:] if l.split(",")[2] == "train_loss_epoch"]
    assert len(losses) == 10
    assert losses[-1] < losses[0]
    assert losses[-1] == pytest.approx(trained.metrics["train_loss_epoch"], rel=1e-6)


def test_fit_callbacks_stop_early_and_keep_the_best(data_dir, tmp_path):
    result = ddpspawn.fit(
        MLP,
        data_dir / "train.csv",
        val=data_dir / "val.csv",
        **common(
            tmp_path,
            lr=1e-9,
            max_epochs=10,
            early_stopping_monitor="val_loss",
            early_stopping_patience=2,
            early_stopping_min_delta=0.01,
            monitor="val_accuracy",
            save_top_k=2,
            lr_monitor="epoch",
        ),
    )
    # The first check sets the best val_loss; two more without a 0.01 gain.
    assert (result.epoch, result.stopped_by) == (3, "early_stopping")
    kept = sorted(os.listdir(tmp_path / "checkpoints"))
    assert len(kept) == 3 and "last.ckpt" in kept, kept
    assert os.path.basename(result.best_model_path) in kept
    assert "val_accuracy=" in result.best_model_path
    assert result.best_model_score == pytest.approx(result.metrics["val_accuracy"], abs=0.05)
    with open(result.metrics_csv) as f:
        rates = [l for l in f.read().splitlines() if ",lr-SGD," in l]
    assert [float(l.split(",")[3]) for l in rates] == [1e-9] * 3


def checkpoint_tensors(torch, path):
    """The weights (model.*) and every rank's RNG state (rng.cpu.<rank>) in a
    ddpspawn checkpoint, read with torch. A format-2 file's header line
    (core/model/checkpoint_envelope.h: the archive's CRC-32 and size) is checked
    and dropped; a format-1 file is the bare LibTorch archive."""
    data = Path(path).read_bytes()
    if not data.startswith(b"PK\x03\x04"):
        header, _, data = data.partition(b"\n")
        magic, crc, size = header.decode().split(" ")
        assert magic == "ddpspawn-checkpoint-2", header
        assert len(data) == int(size.removeprefix("size=")), header
        assert zlib.crc32(data) == int(crc.removeprefix("crc32="), 16), header
    state = torch.jit.load(io.BytesIO(data)).state_dict()
    return {name: t for name, t in state.items() if name.startswith(("model.", "rng."))}


def test_resume_continues_where_fit_stopped(torch, data_dir, tmp_path):
    train, val = data_dir / "train.csv", data_dir / "val.csv"
    first = ddpspawn.fit(MLP, train, val=val, **common(tmp_path / "a", max_epochs=2))
    assert first.resume_options() == {"resume_from": first.checkpoint}
    early = checkpoint_tensors(torch, first.checkpoint)  # the resumed run writes over it
    resumed = ddpspawn.fit(
        MLP, train, val=val, **first.resume_options(), **common(tmp_path / "a", max_epochs=4)
    )
    assert (first.epoch, resumed.epoch) == (2, 4)
    assert resumed.global_step == 2 * first.global_step
    # Bit for bit the same as 4 epochs at once (same seed, same threads): the
    # same metrics, and the same weights and RNG states in the checkpoint.
    straight = ddpspawn.fit(MLP, train, val=val, **common(tmp_path / "b", max_epochs=4))
    assert straight.global_step == resumed.global_step
    assert resumed.metrics == straight.metrics
    after, expected = (checkpoint_tensors(torch, r.checkpoint) for r in (resumed, straight))
    assert {"model.0.weight", "rng.cpu.0", "rng.cpu.1"} <= set(expected), sorted(expected)
    assert sorted(after) == sorted(expected)
    differ = [name for name in expected if not torch.equal(after[name], expected[name])]
    assert differ == [], f"the resumed run's checkpoint differs from the straight run's in {differ}"
    # And it did train on after resuming.
    assert any(not torch.equal(early[n], after[n]) for n in after if n.startswith("model."))


def test_mid_epoch_resume_on_another_number_of_ranks_deals_the_rest_of_the_epoch(data_dir,
                                                                                 tmp_path):
    """Stopped at step 3 of 7 on 2 ranks (200 samples, 16 a batch): 96 samples
    of the epoch's order taken, 104 left, which 1 rank takes in 7 batches and
    3 ranks in 3 (35 each). With limit_train_batches, whose count is of whole
    epochs, it is refused before any rank starts, naming both numbers."""
    train = data_dir / "train.csv"
    mid = ddpspawn.fit(MLP, train, **common(tmp_path / "mid", max_steps=3))
    assert mid.global_step == 3
    for nprocs, steps_left in ((1, 7), (3, 3)):
        more = ddpspawn.fit(MLP, train, **mid.resume_options(),
                            **common(tmp_path / f"on{nprocs}", max_epochs=1, nprocs=nprocs))
        assert (more.epoch, more.global_step) == (1, 3 + steps_left), nprocs
    with pytest.raises(ddpspawn.InvalidArgumentError, match=(
            "saved mid-epoch \\(epoch 1, batch 3\\) by 2 ranks, and with limit_train_batches")):
        ddpspawn.fit(MLP, train, **mid.resume_options(),
                     **common(tmp_path / "limited", max_epochs=1, nprocs=3,
                              limit_train_batches=5))
    same = ddpspawn.fit(MLP, train, **mid.resume_options(), **common(tmp_path / "mid", max_steps=6))
    assert same.global_step == 6
    end = ddpspawn.fit(MLP, train, **common(tmp_path / "end", max_epochs=1))
    more = ddpspawn.fit(MLP, train, **end.resume_options(),
                        **common(tmp_path / "end", max_epochs=2, nprocs=1))
    assert (more.epoch, more.global_step) == (2, 7 + 13)  # then 13 steps of 16 on one rank


def test_validate_and_test_from_the_checkpoint_match_the_fit(data_dir, trained, tmp_path):
    val = data_dir / "val.csv"
    metrics = ddpspawn.validate(
        MLP, val, checkpoint=trained.checkpoint, nprocs=NPROCS, default_root_dir=tmp_path
    )
    assert set(metrics) == {"val_loss", "val_accuracy"}
    assert metrics["val_loss"] == pytest.approx(trained.metrics["val_loss"], rel=1e-6)
    assert metrics["val_accuracy"] == pytest.approx(trained.metrics["val_accuracy"], rel=1e-6)
    tested = ddpspawn.test(
        MLP, val, checkpoint=trained.checkpoint, nprocs=NPROCS, default_root_dir=tmp_path
    )
    assert set(tested) == {"test_loss", "test_accuracy"}
    assert tested["test_loss"] == pytest.approx(metrics["val_loss"], rel=1e-6)


def test_predict_classes_in_dataset_order(data_dir, trained, tmp_path):
    rows = write_classification_csv(tmp_path / "fresh.csv", n=101, seed=7)
    predictions = ddpspawn.predict(
        MLP, tmp_path / "fresh.csv", checkpoint=trained.checkpoint, nprocs=NPROCS,
        default_root_dir=tmp_path / "logs",
    )
    assert len(predictions) == len(rows)  # 101: not a multiple of the ranks
    assert all(type(p) is int and 0 <= p < 3 for p in predictions)
    # Right most of the time only if the order is the dataset's.
    correct = sum(p == label for p, (_, label) in zip(predictions, rows))
    assert correct >= 0.8 * len(rows)
    assert (tmp_path / "logs" / "predictions.csv").is_file()


def test_npy_features_and_labels(tmp_path):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = np.array([classes_of(row) for row in x], dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    result = ddpspawn.fit(
        MLP, (tmp_path / "x.npy", str(tmp_path / "y.npy")),
        val=(tmp_path / "x.npy", tmp_path / "y.npy"),
        **common(tmp_path / "logs", max_epochs=2),
    )
    assert result.epoch == 2 and "val_accuracy" in result.metrics
    predictions = ddpspawn.predict(
        MLP, (tmp_path / "x.npy", tmp_path / "y.npy"), checkpoint=result.checkpoint,
        nprocs=NPROCS, default_root_dir=tmp_path / "logs",
    )
    assert len(predictions) == 64


def test_regression_mlp_predicts_floats(data_dir, tmp_path):
    result = ddpspawn.fit("mlp:4,1", data_dir / "reg.csv", **common(tmp_path, max_epochs=15))
    assert result.metrics["train_loss_epoch"] < 1e-3  # a linear model learns a linear map
    predictions = ddpspawn.predict(
        "mlp:4,1", data_dir / "reg.csv", checkpoint=result.checkpoint, nprocs=NPROCS,
        default_root_dir=tmp_path,
    )
    rows = write_regression_csv(tmp_path / "same.csv")  # the same rows again
    assert len(predictions) == len(rows)
    assert all(isinstance(p, float) for p in predictions)
    assert max(abs(p - y) for p, (_, y) in zip(predictions, rows)) < 0.1


# --- TorchScript models --------------------------------------------------------


def script_classes(torch):
    """Tiny modules for the TorchScript tests (defined once torch is there)."""
    from typing import Dict, List

    class LinearRegression(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.linear(x).squeeze(-1)

        @torch.jit.export
        def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.forward(batch[0]), batch[1].reshape(-1))

        @torch.jit.export
        def validation_step(
            self, batch: List[torch.Tensor], batch_idx: int
        ) -> Dict[str, torch.Tensor]:
            loss = torch.nn.functional.mse_loss(self.forward(batch[0]), batch[1].reshape(-1))
            return {"val_loss": loss}

        @torch.jit.export
        def predict_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.forward(batch[0])

    class NoTrainingStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.linear(x)

    class FailsAtStepOne(LinearRegression):
        @torch.jit.export
        def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                raise RuntimeError("boom at step one")
            return self.forward(batch[0]).sum()

    return LinearRegression, NoTrainingStep, FailsAtStepOne


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


# The tests of TorchScript models are in test_train_torchscript.py.


def test_step_checkpoints_wait_for_the_monitored_metric(data_dir, tmp_path):
    """every_n_train_steps=5 monitoring val_loss: at step 5 no validation has
    run (7 steps an epoch), so the check is skipped, as in Lightning; at step
    10 val_loss exists (epoch 1's) and the checkpoint is written."""
    result = ddpspawn.fit(
        MLP, data_dir / "train.csv", val=data_dir / "val.csv",
        **common(tmp_path, max_epochs=2, every_n_train_steps=5, monitor="val_loss", save_top_k=1),
    )
    assert result.global_step == 14
    kept = sorted(os.listdir(tmp_path / "checkpoints"))
    assert len(kept) == 2 and "last.ckpt" in kept, kept
    assert "step=10-val_loss=" in result.best_model_path, result.best_model_path
    # A metric that validation never logs is an error once validation has run.
    with pytest.raises(ddpspawn.WorkerFailedError, match="monitors 'val_nothing'"):
        ddpspawn.fit(
            MLP, data_dir / "train.csv", val=data_dir / "val.csv",
            **common(tmp_path / "never", max_epochs=2, every_n_train_steps=5,
                     monitor="val_nothing", mode="min"),
        )


# --- Bad inputs: clear errors before any rank starts ------------------------------


def write_truncated_npy(path, rows=20, columns=4):
    """A valid NumPy 1.0 header for float32 (rows, columns), then half the data."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {columns}), }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(b"\0" * (rows * columns * 4 // 2))


def test_bad_inputs_fail_before_any_rank_starts(torch, data_dir, tmp_path):
    csv = data_dir / "train.csv"
    (tmp_path / "corrupt.pt").write_bytes(bytes(random.Random(3).getrandbits(8) for _ in range(2048)))
    torch.jit.script(script_classes(torch)[1]()).save(str(tmp_path / "no_step.pt"))
    write_truncated_npy(tmp_path / "short.npy")
    labels = tmp_path / "labels.npy"
    labels.write_bytes(b"")  # never reached: the features fail first
    with open(tmp_path / "tiny.csv", "w") as f:
        f.write("0,0,0,0,1\n1,1,1,1,0\n0,1,0,1,2\n")
    cases = [
        (dict(model=str(tmp_path / "missing.pt"), train=csv), "missing.pt"),
        (dict(model=tmp_path / "corrupt.pt", train=csv), "corrupt.pt.*not a TorchScript"),
        (dict(model=tmp_path / "no_step.pt", train=csv), "no method 'training_step'"),
        (dict(model=MLP, train=(tmp_path / "short.npy", labels)), "short.npy"),
        (dict(model=MLP, train=tmp_path / "tiny.csv", nprocs=4), "3 samples, fewer than the 4"),
        (dict(model=MLP, train=csv, max_epohcs=3), "unknown option 'max_epohcs'"),
        (dict(model="mlp:4,16,2", train=csv), "class labels outside \\[0, 2\\)"),
        (dict(model="mlp:5,16,3", train=csv), "4 features"),
        (dict(model=MLP, train=csv, max_epochs="many"), "max_epochs"),
        (dict(model=MLP, train=csv, resume_from=tmp_path / "none.ckpt"), "none.ckpt"),
        (dict(model=MLP, train=csv, start_method="spawn"), "fork"),
    ]
    for arguments, message in cases:
        root = tmp_path / "never_created"
        with pytest.raises(ddpspawn.InvalidArgumentError, match=message) as caught:
            arguments = dict(arguments)
            ddpspawn.fit(
                arguments.pop("model"), arguments.pop("train"),
                nprocs=arguments.pop("nprocs", NPROCS), default_root_dir=root, **arguments,
            )
        assert caught.value.status == 1, arguments
        assert not root.exists(), arguments  # no rank ran


def test_fit_after_multithreaded_torch_in_the_caller(torch, data_dir, tmp_path):
    """Issue 12: torch.set_num_threads(2) and a matmul in the caller, then a
    fit whose forked ranks run 2 threads each. GNU OpenMP's thread pool does
    not survive fork in the thread that used it; the ranks used to wait for
    its threads forever. In a fresh interpreter, so that nothing else this
    test process did (or did not do) with torch changes the outcome."""
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        import ddpspawn

        torch.set_num_threads(2)
        a = torch.randn(256, 256)
        (a @ a).sum()
        result = ddpspawn.fit(
            {MLP!r}, {str(data_dir / "train.csv")!r}, nprocs=2, num_threads=2,
            start_method="fork", max_epochs=1, batch_size=16, progress=False,
            default_root_dir={str(tmp_path / "out")!r}, timeout=40,
        )
        print("epoch", result.epoch)
    """))
    package_root = str(Path(ddpspawn.__file__).resolve().parent.parent)
    try:
        caller = subprocess.run(
            [sys.executable, str(script)],
            env=dict(os.environ, PYTHONPATH=package_root),
            capture_output=True,
            text=True,
            timeout=90,  # past fit's own timeout: its error, or this failure
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"fit did not end in 90 s (it hangs): {expired.stderr!r}")
    assert caller.returncode == 0, caller.stderr
    assert caller.stdout.split() == ["epoch", "1"]


def test_bad_inputs_of_evaluation_commands(data_dir, tmp_path):
    with pytest.raises(ddpspawn.InvalidArgumentError, match="nowhere.ckpt"):
        ddpspawn.validate(MLP, data_dir / "val.csv", checkpoint=tmp_path / "nowhere.ckpt")
    with pytest.raises(ddpspawn.InvalidArgumentError, match="missing.csv"):
        ddpspawn.predict(MLP, tmp_path / "missing.csv")
    with pytest.raises(ddpspawn.InvalidArgumentError, match="labels"):
        ddpspawn.test(MLP, tmp_path / "x.npy")  # .npy features without labels


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda csv: ddpspawn.fit(MLP, csv, nprocs=0), "nprocs"),
        (lambda csv: ddpspawn.fit(MLP, csv, nproc_per_node=2), "nprocs"),
        (lambda csv: ddpspawn.fit(MLP, csv, train_labels="y.npy"), "features, labels"),
        (lambda csv: ddpspawn.fit(MLP, csv, data=csv), "own argument"),
        (lambda csv: ddpspawn.fit(MLP, csv, default_root_dir="a\0b"), "NUL"),
        (lambda csv: ddpspawn.fit(MLP, csv, lr=[0.1]), "option lr"),
        (lambda csv: ddpspawn.fit(MLP, (csv, csv, csv)), "pair"),
        (lambda csv: ddpspawn.fit(42, csv), "model must be"),
        (lambda csv: ddpspawn.fit("", csv), "model is empty"),
        (lambda csv: ddpspawn.validate(MLP, 3.5), "data must be a path"),
    ],
)
def test_python_side_argument_checks(data_dir, call, message):
    with pytest.raises(ddpspawn.InvalidArgumentError, match=message) as caught:
        call(data_dir / "train.csv")
    assert caught.value.status is None  # found before calling the library


def test_option_values_are_encoded_for_the_library():
    entries = dict(
        _train._option_entries(
            {"shuffle": False, "drop_last": True, "lr": 0.1, "max_epochs": 3,
             "default_root_dir": os.path.join("a", "b"), "seed": None}
        )
    )
    assert entries == {
        "shuffle": b"false", "drop_last": b"true", "lr": b"0.1", "max_epochs": b"3",
        "default_root_dir": os.fsencode(os.path.join("a", "b")),
    }


def test_fit_result_is_a_plain_dataclass():
    result = ddpspawn.FitResult("c.ckpt", "m.csv", 2, 14, {"val_loss": 0.5})
    assert result.resume_options() == {"resume_from": "c.ckpt"}
    assert "val_loss" in repr(result) and type(result).__module__ == "ddpspawn"
