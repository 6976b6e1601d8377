"""Tests of the training entry points with TorchScript models (ddpspawn.fit /
validate / test / predict given a scripted module or its file): real runs with
2 forked ranks on small data the tests write themselves. The built-in MLP's
runs and the inputs rejected before any process starts are in test_train.py,
whose helpers these tests share."""

import os
import tempfile

import pytest

import ddpspawn
from ddpspawn import _train
from test_train import NPROCS, checkpoint_tensors, script_classes, write_regression_csv


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The regression data these tests train on (test_train.py's reg.csv)."""
    directory = tmp_path_factory.mktemp("train_data")
    write_regression_csv(directory / "reg.csv")
    return directory


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def scripted_regression(torch):
    torch.manual_seed(0)
    return torch.jit.script(script_classes(torch)[0]())


def saved_models():
    """The temporary model files' directories that exist now."""
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("ddpspawn-model-")}


def test_script_module_trains_from_object_and_from_file(torch, data_dir, tmp_path):
    module = scripted_regression(torch)
    before = saved_models()
    module.save(str(tmp_path / "net.pt"))
    options = dict(nprocs=NPROCS, max_epochs=3, lr=0.05, seed=0, progress=False)
    from_object = ddpspawn.fit(
        module, data_dir / "reg.csv", val=data_dir / "reg.csv",
        default_root_dir=tmp_path / "a", **options,
    )
    from_file = ddpspawn.fit(
        tmp_path / "net.pt", data_dir / "reg.csv", val=data_dir / "reg.csv",
        default_root_dir=tmp_path / "b", **options,
    )
    assert from_object.epoch == from_file.epoch == 3
    # Same initial weights, same seed: the same run.
    assert from_object.metrics == pytest.approx(from_file.metrics, rel=1e-6)
    with open(from_object.metrics_csv) as f:
        losses = [float(l.split(",")[3]) for l in f if ",train_loss_epoch," in l]
    assert losses[-1] < losses[0]
    # No temporary model file is left behind, and the module is unchanged.
    assert saved_models() == before
    reloaded = torch.jit.load(str(tmp_path / "net.pt"))
    assert torch.equal(reloaded.linear.weight, module.linear.weight)


def test_script_checkpoint_holds_rank_zero_final_weights(torch, data_dir, tmp_path):
    module = scripted_regression(torch)
    result = ddpspawn.fit(
        module, data_dir / "reg.csv", val=data_dir / "reg.csv", nprocs=NPROCS,
        max_epochs=2, lr=0.02, seed=0, progress=False, default_root_dir=tmp_path,
    )
    assert result.metrics["val_loss"] > 1e-3  # not trained to zero: a real comparison
    metrics = ddpspawn.validate(
        module, data_dir / "reg.csv", checkpoint=result.checkpoint, nprocs=NPROCS,
        default_root_dir=tmp_path,
    )
    assert metrics["val_loss"] == pytest.approx(result.metrics["val_loss"], rel=1e-6)
    # test without test_step falls back on validation_step.
    assert ddpspawn.test(
        module, data_dir / "reg.csv", checkpoint=result.checkpoint, nprocs=NPROCS,
        default_root_dir=tmp_path,
    )["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-6)


def test_script_predict_matches_in_process_forward(torch, data_dir, tmp_path):
    module = scripted_regression(torch)
    rows = write_regression_csv(tmp_path / "reg.csv")
    predictions = ddpspawn.predict(
        module, tmp_path / "reg.csv", nprocs=NPROCS, default_root_dir=tmp_path
    )
    assert len(predictions) == len(rows)
    with torch.no_grad():
        expected = module(torch.tensor([x for x, _ in rows], dtype=torch.float32)).tolist()
    for got, want in zip(predictions, expected):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)  # the CSV holds 6 digits


def test_script_step_failure_is_worker_failed(torch, data_dir, tmp_path):
    failing = torch.jit.script(script_classes(torch)[2]())
    with pytest.raises(ddpspawn.WorkerFailedError) as caught:
        ddpspawn.fit(
            failing, data_dir / "reg.csv", nprocs=NPROCS, max_epochs=1, progress=False,
            default_root_dir=tmp_path,
        )
    error = caught.value
    assert error.rank in (0, 1)
    assert f"rank {error.rank}" in str(error)
    assert error.exit_code == 1 and error.signal is None
    assert "boom at step one" in error.traceback_text
    assert "training_step" in error.traceback_text
    # The details come from the library (ddpspawn_run_rank_report), not from the message text.
    again = _train._worker_failed("a message that names no rank")
    assert (again.rank, again.exit_code, again.signal) == (error.rank, 1, None)
    assert again.traceback_text == error.traceback_text


def batchnorm_regression(torch):
    """The linear regression behind a BatchNorm1d (buffers: running statistics)."""

    class BatchNormRegression(script_classes(torch)[0]):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return self.linear(self.norm(x)).squeeze(-1)

    torch.manual_seed(0)
    return torch.jit.script(BatchNormRegression())


def test_validation_with_buffers_on_shards_of_unequal_length(torch, data_dir, tmp_path):
    """65 validation samples on 2 ranks with batches of 32: rank 0 runs two
    batches, rank 1 one. Evaluation runs under no-grad, where DDP broadcasts no
    buffers (as torch's DDP in eval); a broadcast per batch would meet no
    partner on rank 0's second batch."""
    rows = write_regression_csv(tmp_path / "val65.csv", n=65, seed=5)
    module = batchnorm_regression(torch)
    result = ddpspawn.fit(
        module, data_dir / "reg.csv", val=tmp_path / "val65.csv", nprocs=NPROCS, max_epochs=2,
        batch_size=32, lr=0.05, seed=0, progress=False, default_root_dir=tmp_path,
    )
    assert result.epoch == 2
    # validate() from the checkpoint: rank 0's weights and buffers on both
    # ranks, so the mean over the 65 samples is the in-process one.
    metrics = ddpspawn.validate(
        module, tmp_path / "val65.csv", checkpoint=result.checkpoint, nprocs=NPROCS,
        batch_size=32, default_root_dir=tmp_path,
    )
    state = {k[len("model."):]: t for k, t in checkpoint_tensors(torch, result.checkpoint).items()
             if k.startswith("model.")}
    module.load_state_dict(state)
    module.eval()
    with torch.no_grad():
        x = torch.tensor([x for x, _ in rows], dtype=torch.float32)
        y = torch.tensor([y for _, y in rows], dtype=torch.float32)
        expected = torch.nn.functional.mse_loss(module(x), y).item()
    assert metrics["val_loss"] == pytest.approx(expected, rel=1e-5)


def test_metric_names_that_differ_across_ranks_are_an_error(torch, tmp_path):
    """A validation_step whose names depend on its data: rank 0's shard holds
    the one large sample (index 0) and names 'large', rank 1's names 'small'.
    Summed by position, each would land under the other's name."""
    from typing import Dict, List

    class DataDependentNames(script_classes(torch)[0]):
        @torch.jit.export
        def validation_step(
            self, batch: List[torch.Tensor], batch_idx: int
        ) -> Dict[str, torch.Tensor]:
            loss = torch.nn.functional.mse_loss(self.forward(batch[0]), batch[1].reshape(-1))
            if bool(batch[0][:, 0].max() > 50.0):
                return {"val_loss": loss, "large": loss}
            return {"val_loss": loss, "small": loss}

    with open(tmp_path / "val.csv", "w") as f:
        for i in range(20):
            f.write(f"{100.0 if i == 0 else 0.1 * i:.6f},0,0,0,1.0\n")
    module = torch.jit.script(DataDependentNames())
    with pytest.raises(ddpspawn.WorkerFailedError) as caught:
        ddpspawn.validate(
            module, tmp_path / "val.csv", nprocs=NPROCS, batch_size=16,
            default_root_dir=tmp_path,
        )
    message = str(caught.value) + caught.value.traceback_text
    assert "different metric names" in message, message
    assert "rank 0: large, val_loss" in message and "rank 1: small, val_loss" in message, message


def test_script_training_step_may_return_a_dict_that_logs(torch, data_dir, tmp_path):
    """A training_step's dict: its 'loss' is trained on, every other entry is
    logged, reduced over the ranks as the loss is (Log with sync_dist)."""
    from typing import Dict, List

    class LogsTwiceTheLoss(script_classes(torch)[0]):
        @torch.jit.export
        def training_step(
            self, batch: List[torch.Tensor], batch_idx: int
        ) -> Dict[str, torch.Tensor]:
            loss = torch.nn.functional.mse_loss(self.forward(batch[0]), batch[1].reshape(-1))
            return {"loss": loss, "twice_the_loss": 2 * loss.detach()}

    torch.manual_seed(0)
    result = ddpspawn.fit(
        torch.jit.script(LogsTwiceTheLoss()), data_dir / "reg.csv", nprocs=NPROCS, max_epochs=2,
        lr=0.05, seed=0, progress=False, log_every_n_steps=1, default_root_dir=tmp_path,
    )
    metrics = result.metrics
    assert metrics["twice_the_loss_epoch"] == pytest.approx(2 * metrics["train_loss_epoch"],
                                                            rel=1e-12)
    assert metrics["twice_the_loss"] == pytest.approx(2 * metrics["train_loss"], rel=1e-12)
    with open(result.metrics_csv) as f:
        rows = [line.split(",") for line in f]
    logged = [r for r in rows if r[2] == "twice_the_loss"]
    losses = [r for r in rows if r[2] == "train_loss"]
    assert len(logged) == len(losses) > 2
    for a, b in zip(logged, losses):
        assert a[:2] == b[:2] and float(a[3]) == pytest.approx(2 * float(b[3]), rel=1e-6)

    class NoLossInTheDict(script_classes(torch)[0]):
        @torch.jit.export
        def training_step(
            self, batch: List[torch.Tensor], batch_idx: int
        ) -> Dict[str, torch.Tensor]:
            return {"mse": self.forward(batch[0]).sum()}

    # Found by the check before any rank starts, which runs one step.
    with pytest.raises(ddpspawn.InvalidArgumentError,
                       match=r"training_step returned a dict without 'loss' \(it has: mse\)"):
        ddpspawn.fit(
            torch.jit.script(NoLossInTheDict()), data_dir / "reg.csv", nprocs=NPROCS,
            max_epochs=1, progress=False, default_root_dir=tmp_path / "no_loss",
        )


def test_plain_nn_module_is_rejected(torch, data_dir, tmp_path):
    with pytest.raises(ddpspawn.InvalidArgumentError, match="torch.jit.script"):
        ddpspawn.fit(script_classes(torch)[0](), data_dir / "reg.csv")


def test_script_module_trains_fully_sharded_as_unsharded(torch, data_dir, tmp_path):
    """sharding_strategy full_shard on a TorchScript model: its forward cannot
    call back between its layers, so the whole model is one unit, gathered for
    each training step and sharded between steps (with evaluation, checkpoints
    and the end of fit holding it whole). The weights and metrics are the
    unsharded fit's, bit for bit, and each rank keeps its rows of the
    parameters only: half of them, where shard_grad_op keeps them all. (With
    one unit the peak is a step's, with the model whole: not below
    shard_grad_op's.)"""
    linear_regression = script_classes(torch)[0]

    class Wide(linear_regression):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Sequential(
                torch.nn.Linear(4, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                torch.nn.ReLU(), torch.nn.Linear(256, 1))

    torch.manual_seed(0)
    module = torch.jit.script(Wide())
    elements = sum(p.numel() for p in module.parameters())
    options = dict(nprocs=NPROCS, max_epochs=2, lr=0.01, seed=0, progress=False,
                   optimizer="adam", val=data_dir / "reg.csv")
    results = {
        strategy: ddpspawn.fit(module, data_dir / "reg.csv", default_root_dir=tmp_path / strategy,
                               sharding_strategy=strategy, **options)
        for strategy in ("no_shard", "shard_grad_op", "full_shard")}
    plain, sharded = results["no_shard"], results["full_shard"]
    assert sharded.global_step == plain.global_step > 0
    assert sharded.metrics == plain.metrics
    a, b = (checkpoint_tensors(torch, r.checkpoint) for r in (plain, sharded))
    assert a.keys() == b.keys()
    for name in a:
        if name.startswith("model."):
            assert torch.equal(a[name], b[name]), name
    kept = {s: [int(v) for v in r.values["parameter_bytes"].split(",")]
            for s, r in results.items()}
    assert kept["no_shard"] == kept["shard_grad_op"] == [4 * elements] * NPROCS, kept
    # Dim-0 rows: of each parameter's r rows rank 0 keeps c = ceil(r / 2), rank 1 the rest.
    mine = [0, 0]
    for p in module.parameters():
        r = p.shape[0] if p.dim() else 1
        c = -(-r // 2)
        mine[0] += 4 * (p.numel() // r) * c
        mine[1] += 4 * (p.numel() // r) * (r - c)
    assert kept["full_shard"] == mine, (kept, mine)
    assert sum(kept["full_shard"]) == 4 * elements
    assert sharded.values["full_shard_units"] == "1"
    # Units by size would need the forward to call back between its layers: refused up front.
    with pytest.raises(ddpspawn.InvalidArgumentError, match="auto_wrap_min_params needs a model "
                                                            "whose forward runs its parts"):
        ddpspawn.fit(module, data_dir / "reg.csv", default_root_dir=tmp_path / "auto",
                     sharding_strategy="full_shard", auto_wrap_min_params=1000, **options)
