"""Fit's loggers on 2 forked ranks: TensorBoard's event files, read back
with the tensorboard package's own reader (scalars equal to metrics.csv's
rows, the given options as the HParams plugin's hyperparameters), and the
CSV logger's hparams.yaml. The reader checks each record's CRC-32C and stops
at the first bad one, so reading every row back checks the framing too."""

import pytest

import ddpspawn
from test_train import MLP, NPROCS, common, write_classification_csv

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
plugin_data_pb2 = pytest.importorskip("tensorboard.plugins.hparams.plugin_data_pb2")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("loggers")
    write_classification_csv(directory / "train.csv", seed=0)
    write_classification_csv(directory / "val.csv", n=100, seed=1)
    return directory


def csv_rows(path):
    with open(path) as f:
        next(f)
        return [(line.split(",")[2], int(line.split(",")[1]), float(line.split(",")[3]))
                for line in f]


def test_tensorboard_reads_the_scalars_and_hyperparameters(data, tmp_path):
    result = ddpspawn.fit(MLP, data / "train.csv", val=data / "val.csv", max_epochs=3,
                          logger="csv,tensorboard", log_every_n_steps=2,
                          **common(tmp_path))
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    accumulator = event_accumulator.EventAccumulator(str(events[0]), size_guidance={"scalars": 0})
    accumulator.Reload()
    rows = csv_rows(result.metrics_csv)
    for name in ("train_loss", "train_loss_epoch", "val_loss", "val_accuracy"):
        expected = [(step, value) for n, step, value in rows if n == name]
        read = [(e.step, e.value) for e in accumulator.Scalars(name)]
        assert len(read) == len(expected) > 0, name
        for (step, value), (read_step, read_value) in zip(expected, read):
            assert read_step == step
            assert read_value == pytest.approx(value, rel=1e-6)  # float32 in the event
    content = accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["lr"].number_value == pytest.approx(0.1)
    assert hparams["max_epochs"].number_value == 3
    assert hparams["logger"].string_value == "csv,tensorboard"
    assert hparams["progress"].bool_value is False
    yaml = (tmp_path / "hparams.yaml").read_text()
    assert "lr: '0.1'" in yaml and "max_epochs: '3'" in yaml


def test_tensorboard_alone_writes_no_csv(data, tmp_path):
    result = ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, logger="tensorboard",
                          **common(tmp_path))
    assert result.metrics_csv == ""
    assert not (tmp_path / "metrics.csv").exists()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    with pytest.raises(ddpspawn.InvalidArgumentError, match="csv, tensorboard"):
        ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, logger="wandb", **common(tmp_path))


def profile_rows(text, rank):
    """{action: calls} of one rank's table in profile.txt."""
    section = text.split(f"rank {rank}:\n")[1].split("\n\n")[0]
    rows = {}
    for line in section.splitlines()[1:]:
        fields = line.split()
        if fields[0] in ("training_step", "backward", "optimizer_step", "validation"):
            rows[fields[0]] = int(fields[2])
    return rows


def profile_seconds(text, rank):
    """{row: total seconds} of one rank's table in profile.txt (its rows without calls too)."""
    section = text.split(f"rank {rank}:\n")[1].split("\n\n")[0]
    rows = {}
    for line in section.splitlines()[1:]:
        name, total = line[:28].strip(), line.split()[-2]
        rows[name] = float(total)
    return rows


def test_simple_profiler_counts_every_rank_s_actions(data, tmp_path):
    result = ddpspawn.fit(MLP, data / "train.csv", val=data / "val.csv", max_epochs=2,
                          profiler="simple", accumulate_grad_batches=2, **common(tmp_path))
    text = (tmp_path / "profile.txt").read_text()
    # 7 batches an epoch, an optimizer step every 2 and at the epoch's end: 4.
    for rank in range(NPROCS):
        assert profile_rows(text, rank) == {
            "training_step": 14, "backward": 14, "optimizer_step": 8, "validation": 2,
        }, text
    assert result.global_step == 8
    # Each rank's time blocked in collectives (every step all-reduces): more than none, less than
    # the fit.
    for rank in range(NPROCS):
        seconds = profile_seconds(text, rank)
        assert 0 < seconds["collectives (time blocked)"] < seconds["fit"], text


def test_pytorch_profiler_writes_a_chrome_trace_per_rank(data, tmp_path):
    import json

    ddpspawn.fit(MLP, data / "train.csv", max_epochs=1, profiler="pytorch", **common(tmp_path))
    for rank in range(NPROCS):
        with open(tmp_path / "profiler" / f"rank{rank}.pt.trace.json") as f:
            trace = json.load(f)
        names = {event.get("name") for event in trace["traceEvents"]}
        # The MLP's linear layers, forward and backward, as LibTorch ran them.
        assert "aten::addmm" in names and "aten::mm" in names, sorted(names)[:50]
