"""Lightning's options for iterating quickly, through ddpspawn.fit /
validate / test / predict on 2 forked ranks: limit_*_batches (counts and
fractions), val_check_interval, num_sanity_val_steps, fast_dev_run,
overfit_batches and deterministic. Each test asserts what the option
changes: the steps taken, where validation rows fall in metrics.csv, which
samples an evaluation saw."""

from typing import Dict, List

import pytest

import ddpspawn
from test_train import MLP, NPROCS, common, script_classes, write_classification_csv

# train.csv: 200 samples, 100 per rank: 7 batches of 16 an epoch.
TRAIN_BATCHES = 7


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("iterating")
    write_classification_csv(directory / "train.csv", seed=0)
    write_classification_csv(directory / "val.csv", n=100, seed=1)  # 50 a rank: 4 batches
    return directory


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def rows(result, name):
    """(epoch, step) of every metrics.csv row named `name`."""
    with open(result.metrics_csv) as f:
        return [tuple(int(v) for v in line.split(",")[:2]) for line in f
                if line.split(",")[2] == name]


def test_limit_train_batches_counts_and_fractions(data, tmp_path):
    by_count = ddpspawn.fit(MLP, data / "train.csv", max_epochs=2, limit_train_batches=3,
                            **common(tmp_path / "count"))
    assert by_count.global_step == 6
    half = ddpspawn.fit(MLP, data / "train.csv", max_epochs=2, limit_train_batches=0.5,
                        **common(tmp_path / "half"))
    assert half.global_step == 2 * (TRAIN_BATCHES // 2)
    # 1.0 is every batch; 1 is one batch.
    every = ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, limit_train_batches=1.0,
                         **common(tmp_path / "every"))
    assert every.global_step == TRAIN_BATCHES
    one = ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, limit_train_batches=1,
                       **common(tmp_path / "one"))
    assert one.global_step == 1


def test_a_limit_that_comes_to_no_batch_is_refused(data, tmp_path):
    with pytest.raises(ddpspawn.DdpspawnError, match=r"limit_train_batches=0.1 asks for 0.1 of "
                                                     r"7 batches, which is none"):
        ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, limit_train_batches=0.1,
                     **common(tmp_path))
    with pytest.raises(ddpspawn.InvalidArgumentError, match="a fraction of them"):
        ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, limit_train_batches=1.5,
                     **common(tmp_path))


def batch_index_validation(torch):
    """A regression module whose validation reports the mean batch index it
    saw (weighted by samples): 0 when only the first batch ran."""

    class ReportsBatchIndex(script_classes(torch)[0]):
        @torch.jit.export
        def validation_step(
            self, batch: List[torch.Tensor], batch_idx: int
        ) -> Dict[str, torch.Tensor]:
            return {"val_batch": torch.tensor(float(batch_idx))}

        @torch.jit.export
        def test_step(self, batch: List[torch.Tensor], batch_idx: int) -> Dict[str, torch.Tensor]:
            return {"test_batch": torch.tensor(float(batch_idx))}

    torch.manual_seed(0)
    return torch.jit.script(ReportsBatchIndex())


def regression_csv(path, n):
    with open(path, "w") as f:
        for i in range(n):
            f.write(f"{i / n:.6f},0.5,0.25,0.125,{i / n:.6f}\n")
    return path


def test_limit_val_and_test_batches_bound_what_evaluation_sees(torch, tmp_path):
    module = batch_index_validation(torch)
    data = regression_csv(tmp_path / "reg.csv", 100)  # 50 a rank, 4 batches of 16
    options = dict(nprocs=NPROCS, batch_size=16, default_root_dir=tmp_path)
    assert ddpspawn.validate(module, data, **options)["val_batch"] > 1
    assert ddpspawn.validate(module, data, limit_val_batches=1, **options)["val_batch"] == 0
    two = ddpspawn.test(module, data, limit_test_batches=2, **options)["test_batch"]
    assert two == pytest.approx(0.5)  # batches 0 and 1, 16 samples each
    fit = ddpspawn.fit(module, data, val=data, max_epochs=1, limit_val_batches=0,
                       progress=False, **options)
    assert "val_batch" not in fit.metrics


def test_limit_predict_batches_predicts_the_first_samples(data, tmp_path):
    fitted = ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, **common(tmp_path / "fit"))
    predictions = ddpspawn.predict(
        MLP, data / "val.csv", checkpoint=fitted.checkpoint, nprocs=NPROCS, batch_size=16,
        limit_predict_batches=1, default_root_dir=tmp_path / "limited",
    )
    every = ddpspawn.predict(
        MLP, data / "val.csv", checkpoint=fitted.checkpoint, nprocs=NPROCS, batch_size=16,
        default_root_dir=tmp_path / "every",
    )
    assert len(every) == 100
    assert predictions == every[:32]  # one batch of 16 on each of 2 ranks


def test_val_check_interval_validates_within_the_epoch(data, tmp_path):
    every_3 = ddpspawn.fit(MLP, data / "train.csv", val=data / "val.csv", max_epochs=2,
                           val_check_interval=3, **common(tmp_path / "count"))
    # 7 batches an epoch: after batches 3 and 6, not at the end (7 is no multiple).
    assert rows(every_3, "val_loss") == [(0, 3), (0, 6), (1, 10), (1, 13)]
    halves = ddpspawn.fit(MLP, data / "train.csv", val=data / "val.csv", max_epochs=1,
                          val_check_interval=0.5, **common(tmp_path / "half"))
    assert rows(halves, "val_loss") == [(0, 3), (0, 6)]
    default = ddpspawn.fit(MLP, data / "train.csv", val=data / "val.csv", max_epochs=2,
                           **common(tmp_path / "default"))
    assert rows(default, "val_loss") == [(0, 7), (1, 14)]
    with pytest.raises(ddpspawn.DdpspawnError, match=r"val_check_interval=8 must be a count in "
                                                     r"\[1, 7\]"):
        ddpspawn.fit(MLP, data / "train.csv", val=data / "val.csv", max_epochs=1,
                     val_check_interval=8, **common(tmp_path / "over"))


def failing_validation(torch):
    """Fails at its second batch: the check before the ranks start runs one
    step of batch 0, the sanity steps run batches 0 and 1."""

    class FailsInValidation(script_classes(torch)[0]):
        @torch.jit.export
        def validation_step(
            self, batch: List[torch.Tensor], batch_idx: int
        ) -> Dict[str, torch.Tensor]:
            if batch_idx == 1:
                raise RuntimeError("validation is broken")
            return {"val_loss": torch.tensor(0.0)}

    return torch.jit.script(FailsInValidation())


def test_sanity_steps_find_a_broken_validation_before_training(torch, tmp_path):
    data = regression_csv(tmp_path / "reg.csv", 100)
    options = dict(nprocs=NPROCS, batch_size=16, max_epochs=1, progress=False)
    with pytest.raises(ddpspawn.WorkerFailedError) as caught:
        ddpspawn.fit(failing_validation(torch), data, val=data,
                     default_root_dir=tmp_path / "sanity", **options)
    assert "validation is broken" in str(caught.value) + caught.value.traceback_text
    # Found before the first training step: no training row was written.
    csv = tmp_path / "sanity" / "metrics.csv"
    assert not csv.exists() or "train_loss" not in csv.read_text()
    # Without sanity steps, the epoch trains first.
    with pytest.raises(ddpspawn.WorkerFailedError):
        ddpspawn.fit(failing_validation(torch), data, val=data, num_sanity_val_steps=0,
                     log_every_n_steps=1, default_root_dir=tmp_path / "late", **options)
    assert "train_loss" in (tmp_path / "late" / "metrics.csv").read_text()


def test_fast_dev_run_runs_a_batch_of_each_and_writes_no_top_k(data, tmp_path):
    result = ddpspawn.fit(
        MLP, data / "train.csv", val=data / "val.csv", max_epochs=5, fast_dev_run=True,
        save_top_k=2, monitor="val_loss", early_stopping_monitor="val_loss",
        **common(tmp_path),
    )
    assert (result.epoch, result.global_step) == (1, 1)
    assert rows(result, "val_loss") == [(0, 1)]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt"]
    three = ddpspawn.fit(MLP, data / "train.csv", max_epochs=5, fast_dev_run=3,
                         **common(tmp_path / "three"))
    assert (three.epoch, three.global_step) == (1, 3)


def test_overfit_batches_trains_and_validates_on_the_first_training_batches(torch, tmp_path):
    data = regression_csv(tmp_path / "reg.csv", 100)
    # Validation data far from the training data: a val_loss near the
    # training loss means validation ran on the training batches.
    with open(tmp_path / "far.csv", "w") as f:
        for i in range(100):
            f.write(f"{i / 100:.6f},0.5,0.25,0.125,1000.0\n")
    result = ddpspawn.fit(
        batch_index_validation(torch), data, val=tmp_path / "far.csv", nprocs=NPROCS,
        batch_size=16, max_epochs=3, overfit_batches=2, progress=False,
        default_root_dir=tmp_path / "logs",
    )
    assert result.global_step == 6  # 2 batches an epoch
    # Validation on the 2 training batches only: batch indices 0 and 1.
    assert result.metrics["val_batch"] == pytest.approx(0.5)


def test_deterministic_refuses_an_op_without_a_deterministic_kernel(torch, tmp_path):
    class PutsInPlace(script_classes(torch)[0]):
        @torch.jit.export
        def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
            out = self.forward(batch[0])
            scratch = torch.zeros(4)
            scratch.put_(torch.tensor([0, 1]), torch.tensor([1.0, 2.0]))  # accumulate=False
            return torch.nn.functional.mse_loss(out, batch[1].reshape(-1)) + scratch.sum() * 0

    data = regression_csv(tmp_path / "reg.csv", 64)
    options = dict(nprocs=NPROCS, batch_size=16, max_epochs=1, progress=False)
    ddpspawn.fit(torch.jit.script(PutsInPlace()), data, default_root_dir=tmp_path / "free",
                 **options)
    with pytest.raises(ddpspawn.WorkerFailedError) as caught:
        ddpspawn.fit(torch.jit.script(PutsInPlace()), data, deterministic=True,
                     default_root_dir=tmp_path / "deterministic", **options)
    message = str(caught.value) + caught.value.traceback_text
    assert "does not have a deterministic implementation" in message, message


def test_ddp_options_reach_fit(data, tmp_path):
    """The DDP options of the option table, through fit: PowerSGD's rank and
    start (what the last compressed step sent), the buckets' caps and the
    compression wrapper (its rounding changes the loss)."""
    from ddpspawn import _train

    runs = []

    def fit(**options):
        runs.append(options)
        entries = dict(model="mlp:4,64,64,3", train=str(data / "train.csv"), nproc_per_node=2,
                       max_epochs=1, batch_size=16, progress="false",
                       default_root_dir=str(tmp_path / f"run{len(runs)}"), **options)
        return _train.run("fit", [(k, str(v).encode()) for k, v in entries.items()])

    rank_1 = fit(ddp_comm_hook="powersgd", powersgd_start_iteration=0)
    rank_2 = fit(ddp_comm_hook="powersgd", powersgd_start_iteration=0, powersgd_rank=2,
                 bucket_cap_mb=0.01)
    dense = int(rank_1["powersgd.dense_elements"])
    assert 0 < int(rank_1["powersgd.sent_elements"]) < int(rank_2["powersgd.sent_elements"])
    assert int(rank_2["powersgd.sent_elements"]) < dense == int(rank_2["powersgd.dense_elements"])
    # Batched: the model's 4,675 elements in one bucket, a 69x69 square; rank 1
    # sends P and Q of 69 each.
    batched = fit(ddp_comm_hook="batched_powersgd", powersgd_start_iteration=0)
    assert (batched["powersgd.sent_elements"], batched["powersgd.dense_elements"]) == (
        str(2 * 69), str(dense))
    not_yet = fit(ddp_comm_hook="powersgd", powersgd_start_iteration=1000)
    assert not_yet["powersgd.sent_elements"] == "0"
    # The compression wrapper rounds each bucket to bf16 around the sum: the same seed and data
    # train to another loss, close to the plain one.
    plain = float(fit(ddp_comm_hook="allreduce")["metric.train_loss_epoch"])
    wrapped = fit(ddp_comm_hook="allreduce", ddp_comm_wrapper="bf16")
    bf16 = float(wrapped["metric.train_loss_epoch"])
    assert bf16 != plain
    assert bf16 == pytest.approx(plain, rel=0.05)
    # The first bucket's cap reaches the reducer's check (its layout: //tests/ddp:buckets_test).
    with pytest.raises(ddpspawn.InvalidArgumentError, match="first_bucket_cap_mb"):
        fit(first_bucket_cap_mb=-1)
    with pytest.raises(ddpspawn.InvalidArgumentError, match="powersgd_rank is ddp_comm_hook "
                                                           "powersgd's; this run's hook is fp16"):
        fit(ddp_comm_hook="fp16", powersgd_rank=2)


def test_broadcast_buffers_reaches_fit(torch, tmp_path):
    """broadcast_buffers through fit: with it, rank 1's BatchNorm statistics are rank 0's before
    each training forward; without, its own. Validation runs on both ranks' buffers, so the
    validation loss (their mean) differs while training, the same on both, does not."""
    from test_train import write_regression_csv
    from test_train_torchscript import batchnorm_regression

    write_regression_csv(tmp_path / "train.csv", n=64, seed=1)
    write_regression_csv(tmp_path / "val.csv", n=64, seed=5)
    results = {}
    for broadcast in (True, False):
        results[broadcast] = ddpspawn.fit(
            batchnorm_regression(torch), tmp_path / "train.csv", val=tmp_path / "val.csv",
            nprocs=NPROCS, max_epochs=1, batch_size=16, lr=0.05, seed=0, progress=False,
            broadcast_buffers=broadcast, default_root_dir=tmp_path / str(broadcast))
    assert results[True].metrics["train_loss_epoch"] == results[False].metrics["train_loss_epoch"]
    assert results[True].metrics["val_loss"] != results[False].metrics["val_loss"]
