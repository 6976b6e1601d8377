"""ddpspawn.torch: DistributedDataParallel for a torch nn.Module on spawned
ranks, checked against one process on the whole batch and against PyTorch's
own DDP; load_weights and export of a checkpoint into a torch module."""

import pytest
import torch

import ddpspawn
import ddpspawn.torch
import ddpspawn_torch_workers as workers
from test_train import script_classes


@pytest.mark.parametrize("start_method", ["spawn", "fork", "forkserver"])
def test_init_process_group_gives_torch_distributed_the_ranks(start_method):
    """torch.distributed's default group, as under mp.spawn: the same ranks and
    backend, collectives, and DistributedSampler's strided shards. (The tests
    above call torch's own init_process_group in the ranks: no group is made
    unasked.)"""
    everyone = ddpspawn.spawn(
        workers.torch_distributed_view, nprocs=2, start_method=start_method, timeout=120
    )
    assert everyone == [
        {"rank": 0, "world_size": 2, "backend": "gloo", "sum": 3.0, "shard": [0, 2, 4, 6, 8]},
        {"rank": 1, "world_size": 2, "backend": "gloo", "sum": 3.0, "shard": [1, 3, 5, 7, 9]},
    ]


@pytest.mark.parametrize("micro_batches", [1, 3], ids=["one_backward", "no_sync_accumulation"])
@pytest.mark.parametrize("world_size", [2, 4])
def test_training_matches_one_process_and_torch_ddp(world_size, micro_batches, tmp_path):
    outcome = ddpspawn.spawn(
        workers.ddp_matches, args=(str(tmp_path), micro_batches), nprocs=world_size, timeout=300
    )
    assert outcome["ranks_agree"], outcome
    assert outcome["moved"] > 1e-2, outcome  # training changed the weights
    # Observed: 3e-8 from one process (float sums in another order), 0 to 3e-8 from torch DDP.
    assert outcome["vs_single_process"] < 1e-6, outcome
    assert outcome["vs_torch_ddp"] < 1e-6, outcome
    # Several buckets, and the later layers' gradients reached the reducer
    # while backward was still running (before the input's gradient).
    assert outcome["buckets"] >= 3, outcome
    assert 0 < outcome["handed_over"] < outcome["parameters"], outcome


def test_no_sync_starts_no_collective():
    # Counted in each rank's flight recorder: a no_sync that did nothing would
    # all-reduce every bucket in both backward passes.
    for rank, (inside, synced, buckets) in enumerate(
        ddpspawn.spawn(workers.no_sync_collectives, nprocs=2, timeout=120)
    ):
        assert buckets >= 3, (rank, buckets)
        assert inside == 0, (rank, inside, synced)
        assert synced >= buckets, (rank, inside, synced)


def test_no_sync_on_some_ranks_only_is_refused_on_every_rank():
    # The model has no buffers, so nothing but the gradients' all-reduce tells
    # the ranks apart: it used to sum rank 0's two micro-batches with rank 1's
    # first.
    for rank, message in enumerate(
        ddpspawn.spawn(workers.no_sync_on_rank_zero_only, nprocs=2, timeout=120)
    ):
        assert "after different numbers of backward passes (no_sync" in message, (rank, message)
        assert "rank 0: all_reduce (mean)" in message, (rank, message)
        assert "DDP's gradients of 2 backward passes" in message, (rank, message)
        assert "DDP's gradients of 1 backward pass," in message, (rank, message)


def test_unused_parameters_with_find_unused():
    per_rank = ddpspawn.spawn(workers.unused_parameters, args=(True,), nprocs=2, timeout=120)
    (grads0, _), (grads1, local_odd) = per_rank
    assert grads0["never.weight"] is None and grads1["never.weight"] is None  # no rank used it
    # Only rank 1 used `odd`: both ranks get the mean with rank 0's zeros.
    half = [g / 2 for g in local_odd]
    assert grads0["odd.weight"] == pytest.approx(half, rel=1e-6)
    assert grads1["odd.weight"] == pytest.approx(half, rel=1e-6)
    assert grads0["shared.weight"] == grads1["shared.weight"]


def test_unused_parameters_without_find_unused_get_zeros():
    per_rank = ddpspawn.spawn(workers.unused_parameters, args=(False,), nprocs=2, timeout=120)
    (grads0, _), (grads1, local_odd) = per_rank
    assert grads0["never.weight"] == grads1["never.weight"] == [0.0] * 3
    assert grads0["odd.weight"] == pytest.approx([g / 2 for g in local_odd], rel=1e-6)


@pytest.mark.parametrize("broadcast_buffers", [True, False])
def test_weights_and_buffers_come_from_rank_zero(broadcast_buffers):
    per_rank = ddpspawn.spawn(
        workers.rank_zero_state, args=(broadcast_buffers,), nprocs=2, timeout=120
    )
    (weights0, seen0), (weights1, seen1) = per_rank
    assert weights0 == weights1  # rank 1's own initial weights were replaced
    assert seen0 == 0.0
    assert seen1 == (0.0 if broadcast_buffers else 5.0)


@pytest.mark.parametrize("find_unused", [False, True])
def test_gradients_live_in_the_buckets_unless_find_unused(find_unused):
    """The fixed gradients are the reducer's bucket slots in shared memory
    (nothing copied in or back), except with find_unused_parameters, where an
    unused one must stay untouched; the ranks agree either way."""
    outcome = ddpspawn.spawn(
        workers.gradients_in_shared_memory, args=(find_unused,), nprocs=2, start_method="fork"
    )
    shared, agree = outcome
    assert agree
    assert shared == [not find_unused] * len(shared), shared


def test_refusals():
    errors = ddpspawn.spawn(workers.refusals, nprocs=1, timeout=120)
    assert errors[0] == ("InvalidArgumentError", True), errors
    assert errors[1] == ("InvalidArgumentError", True), errors
    assert errors[2] == ("TypeError", True), errors
    assert errors[3] == ("InvalidArgumentError", True), errors


# The TorchScript regression module of test_train.py (forward, training_step, predict_step).
Regression = script_classes(torch)[0]


def test_load_weights_puts_a_trained_checkpoint_into_the_module(tmp_path):
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(40, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.25
    rows = torch.cat([x, y[:, None]], dim=1)
    data = tmp_path / "reg.csv"
    data.write_text("".join(",".join(f"{v:.6f}" for v in row) + "\n" for row in rows.tolist()))
    torch.manual_seed(0)
    result = ddpspawn.fit(
        torch.jit.script(Regression()), data, nprocs=2, max_epochs=3, lr=0.05, seed=0,
        progress=False, default_root_dir=tmp_path,
    )
    predictions = torch.tensor(
        ddpspawn.predict(
            torch.jit.script(Regression()), data, checkpoint=result.checkpoint, nprocs=2,
            default_root_dir=tmp_path,
        )
    )

    torch.manual_seed(1)
    fresh = Regression()
    before = fresh(x).detach()
    loaded = ddpspawn.torch.load_weights(result.checkpoint, fresh)
    assert sorted(loaded) == ["linear.bias", "linear.weight"]
    with torch.no_grad():
        after = fresh(torch.tensor(rows[:, :4].tolist()))
    assert (before - predictions).abs().max() > 0.1  # the fresh weights were different
    assert (after - predictions).abs().max() < 1e-5  # the CSV holds 6 digits

    # A module of other names is refused, naming what is missing.
    with pytest.raises(RuntimeError, match="linear.weight"):
        ddpspawn.torch.load_weights(result.checkpoint, torch.nn.Linear(4, 1))
    assert ddpspawn.export(result.checkpoint, tmp_path / "w.safetensors", format="safetensors") == 2
    with pytest.raises(ddpspawn.InvalidArgumentError, match="format"):
        ddpspawn.export(result.checkpoint, tmp_path / "w.bin", format="onnx")
