"""Which rank holds the others back: a rank slowed on purpose is the one named,
by a running job's context (ddpspawn_context_straggler) and in fit's result and
metrics.csv."""

import csv
import random
from typing import List

import pytest

import ddpspawn
import ddpspawn_test_workers as workers
from test_train import script_classes


@pytest.mark.parametrize("slow", [0, 2])
def test_the_context_names_the_slowed_rank(slow):
    report = ddpspawn.spawn(workers.slowed_all_reduces, args=(slow,), nprocs=3, start_method="fork")
    assert report.measured
    assert report.straggler == slow
    # On a loaded 2-core machine another rank is now and then descheduled for
    # longer than the 10 ms (CI saw it once in 20): the slowed rank must be
    # last in at least 18 of the 20.
    last = report.ranks[slow].arrived_last
    assert 18 <= last <= 20, report.summary
    assert sum(r.arrived_last for r in report.ranks) == 20
    assert report.summary.startswith(
        f"rank {slow} arrived last at {100 * last // 20}% of 20 collectives")
    # Late by about the 10 ms it slept, each time.
    assert 0.005 * last < report.ranks[slow].late_seconds < 0.03 * 20
    others = [r for r in range(3) if r != slow]
    # The others waited for it; it hardly waited at all.
    assert all(report.ranks[r].waited_seconds > report.ranks[slow].waited_seconds for r in others)


def test_without_shared_memory_the_context_says_it_is_not_measured(monkeypatch):
    monkeypatch.setenv("DDPSPAWN_SHM_ALLREDUCE", "0")
    report = ddpspawn.spawn(workers.slowed_all_reduces, args=(1, 3), nprocs=2, start_method="fork")
    assert not report.measured
    assert report.straggler == -1
    assert report.summary.startswith("not measured: gloo over TCP")
    assert [r.arrived_last for r in report.ranks] == [0, 0]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def slow_on_marked_rows(torch):
    """A linear regression whose step does ~20 ms of extra matrix products on
    a batch that holds a row marked with 7.0 in its last feature."""

    class SlowOnMarkedRows(script_classes(torch)[0]):  # test_train's LinearRegression
        @torch.jit.export
        def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
            x = batch[0]
            busy = torch.zeros(1, 1)
            if bool((x[:, 3] == 7.0).any()):
                # From the batch, so that TorchScript cannot fold it to a constant.
                busy = torch.ones(200, 200) * (x[:, 3].max() / 1400.0)
                for _ in range(120):
                    busy = busy @ busy
            # Used, so that TorchScript's optimizer cannot drop the products.
            loss = torch.nn.functional.mse_loss(self.forward(x), batch[1].reshape(-1))
            return loss + 0.0 * busy[0, 0]

    torch.manual_seed(0)
    return torch.jit.script(SlowOnMarkedRows())


def fit_with_a_slow_rank_one(torch, tmp_path):
    """A 2-rank fit whose rank 1 shard holds marked rows only: without
    shuffling, rank 1 of 2 reads the odd rows (PyTorch's DistributedSampler)."""
    rng = random.Random(0)
    with open(tmp_path / "train.csv", "w") as f:
        for i in range(256):
            x = [round(rng.uniform(-1.0, 1.0), 6) for _ in range(3)] + [7.0 if i % 2 else 0.0]
            f.write(",".join(f"{v:.6f}" for v in x) + f",{sum(x[:3]):.6f}\n")
    return ddpspawn.fit(
        slow_on_marked_rows(torch), tmp_path / "train.csv", nprocs=2, max_epochs=2,
        batch_size=16, shuffle=False, lr=0.01, seed=0, progress=False,
        default_root_dir=tmp_path / "run",
    )


def straggler_rows(result):
    with open(result.metrics_csv) as f:
        return [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "straggler_rank"]


def test_fit_names_the_rank_whose_shard_is_slow(torch, tmp_path):
    result = fit_with_a_slow_rank_one(torch, tmp_path)
    assert result.straggler_rank == 1, result.straggler
    assert result.straggler.startswith("rank 1 arrived last at ")
    assert result.values["straggler.measured_by"] == "shared memory"
    # At every step's gradient all-reduce at least (8 steps an epoch), by
    # about the 20 ms its step takes longer; rank 0 arrives last only where it
    # alone works (the checkpoint), by far less (observed: 18 times 17.9 ms
    # late against 8 times 0.43 ms; rank 0 waited 322 ms, rank 1 3.5 ms).
    last = int(result.values["straggler.rank1.arrived_last"])
    assert last >= 16
    assert last > int(result.values["straggler.rank0.arrived_last"])
    late_ms = float(result.values["straggler.rank1.late_ms"])
    assert late_ms > 5.0
    # With 2 ranks, each time rank 1 is last by L, rank 0 waits exactly L: its
    # wait covers all of rank 1's lateness (to the pairs' 6 digits). Not
    # compared with rank 1's own wait: in one CI run (another test ran beside
    # it) a stall of rank 0, cause unknown, made rank 1 wait 451 ms against
    # rank 0's 404.
    waited = [float(result.values[f"straggler.rank{r}.waited_ms"]) for r in (0, 1)]
    assert waited[0] >= 0.999 * last * late_ms, (waited, last, late_ms)
    # metrics.csv: each epoch names rank 1.
    assert straggler_rows(result) == [1.0, 1.0]


def test_over_gloo_tcp_fit_names_the_rank_blocked_least(torch, tmp_path, monkeypatch):
    """Without shared memory no arrival is timed; every rank's time blocked in
    collectives still names the slow rank: the others wait for it."""
    monkeypatch.setenv("DDPSPAWN_SHM_ALLREDUCE", "0")
    result = fit_with_a_slow_rank_one(torch, tmp_path)
    assert result.straggler_rank == 1, result.straggler
    assert result.straggler.startswith("rank 1 was blocked least in collectives"), result.straggler
    assert result.values["straggler.measured_by"] == "time blocked in collectives"
    blocked = [float(result.values[f"straggler.rank{r}.blocked_ms"]) for r in (0, 1)]
    # Rank 0 waited for rank 1's extra ~20 ms at each of the 16 steps.
    assert blocked[0] - blocked[1] > 16 * 10.0, blocked
    assert straggler_rows(result) == [1.0, 1.0]
