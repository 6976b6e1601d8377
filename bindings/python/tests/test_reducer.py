"""The gradient reducer: argument checks and lifetime in a group of one here,
and averaging between real worker processes, checked against means computed
here (or, for training, against a single-process run)."""

import array
import gc
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

import ddpspawn
import ddpspawn_reducer_workers as workers

START_METHODS = ["spawn", "fork"]
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


# -- a group of one ----------------------------------------------------------


def test_exported():
    assert ddpspawn.Reducer.__module__ == "ddpspawn"
    assert "Reducer" in ddpspawn.__all__


def test_group_of_one_keeps_values(ctx):
    a = numpy.arange(5, dtype=numpy.float32)
    b = numpy.full((2, 2), -1.5)
    with ctx.reducer([a, b]) as reducer:
        assert isinstance(reducer, ddpspawn.Reducer)
        assert len(reducer) == 2
        assert reducer.buffers[0] is a and reducer.buffers[1] is b
        assert reducer.bucket_count == 2  # one per element type
        assert "buffers=2" in repr(reducer)
        for _ in range(2):
            reducer.mark_ready(1)
            reducer.mark_ready(0)
            reducer.finalize()
            assert a.tolist() == [0, 1, 2, 3, 4]
            assert b.tolist() == [[-1.5, -1.5], [-1.5, -1.5]]


def test_bucket_caps_decide_the_bucket_count(ctx):
    buffers = [numpy.zeros(1000, dtype=numpy.float32) for _ in range(4)]  # 4000 B each
    with ctx.reducer(buffers) as reducer:
        assert reducer.bucket_count == 1
    with ctx.reducer(buffers, bucket_cap_mb=1e-6, first_bucket_cap_mb=1e-6) as reducer:
        assert reducer.bucket_count == 4
    # The first bucket closes after 2 buffers; the other 2 share the next.
    with ctx.reducer(buffers, first_bucket_cap_mb=7000 / 2**20, bucket_cap_mb=1) as reducer:
        assert reducer.bucket_count == 2


def test_marking_errors(ctx):
    with ctx.reducer([numpy.zeros(2), numpy.zeros(3)]) as reducer:
        for bad in (2, -1, 10**30):
            with pytest.raises(ddpspawn.InvalidArgumentError, match="outside"):
                reducer.mark_ready(bad)
        for bad in ("0", 1.0, True, None):
            with pytest.raises(ddpspawn.InvalidArgumentError, match="int"):
                reducer.mark_ready(bad)
        reducer.mark_ready(numpy.int64(0))
        with pytest.raises(ddpspawn.FailedPreconditionError, match="twice"):
            reducer.mark_ready(0)
        reducer.finalize()
        reducer.mark_ready(0)  # a new iteration
        reducer.finalize()


def test_unknown_comm_hook_is_a_clear_error(ctx):
    with pytest.raises(ddpspawn.InvalidArgumentError, match="bogus.*'allreduce', 'fp16', 'bf16'"):
        ctx.reducer([numpy.zeros(2)], comm_hook="bogus")
    with pytest.raises(ddpspawn.InvalidArgumentError, match="str"):
        ctx.reducer([numpy.zeros(2)], comm_hook=None)
    with pytest.raises(ddpspawn.InvalidArgumentError, match="NUL"):
        ctx.reducer([numpy.zeros(2)], comm_hook="fp16\0")


@pytest.mark.parametrize(
    "options, match",
    [
        ({"bucket_cap_mb": 0}, "bucket_cap_mb"),
        ({"first_bucket_cap_mb": -1.0}, "first_bucket_cap_mb"),
        ({"bucket_cap_mb": float("nan")}, "bucket_cap_mb"),
        ({"bucket_cap_mb": "25"}, "bucket_cap_mb"),
        ({"powersgd_rank": 1.5}, "powersgd_rank"),
        ({"powersgd_start_iteration": 2**40}, "out of range"),
        ({"comm_hook": "powersgd", "powersgd_rank": 0}, "rank"),
        ({"comm_hook": "powersgd", "powersgd_start_iteration": -1}, "start iteration"),
        # Post-local SGD averages after the optimizer step, which a reducer does not see.
        ({"comm_hook": "post_localsgd"}, "no optimizer step to average after"),
    ],
)
def test_bad_options(ctx, options, match):
    with pytest.raises(ddpspawn.InvalidArgumentError, match=match):
        ctx.reducer([numpy.zeros(2)], **options)


@pytest.mark.parametrize("hook", ["allreduce", "fp16", "bf16", "powersgd", "batched_powersgd"])
def test_every_known_hook_is_accepted(ctx, hook):
    with ctx.reducer([numpy.ones(3, dtype=numpy.float32)], comm_hook=hook) as reducer:
        reducer.mark_ready(0)
        reducer.finalize()


@pytest.mark.parametrize(
    "buffer, error, match",
    [
        ([1.0, 2.0], TypeError, "list.*in place"),
        ((1.0, 2.0), TypeError, "tuple"),
        ({"a": 1.0}, TypeError, "not a buffer"),
        (numpy.zeros(3, dtype=numpy.float16), TypeError, "unsupported element format"),
        (array.array("h", [1, 2]), TypeError, "unsupported element format"),
        (numpy.zeros((4, 4))[:, 1], ValueError, "not C-contiguous"),
        (numpy.zeros(0, dtype=numpy.float32), ValueError, "empty"),
        (memoryview(b"\0" * 8).cast("d"), ValueError, "read-only"),
    ],
    ids=["list", "tuple", "dict", "float16", "array-h", "strided", "empty", "read-only"],
)
def test_bad_buffers_name_the_index(ctx, buffer, error, match):
    good = numpy.zeros(2)
    with pytest.raises(error, match=match) as caught:
        ctx.reducer([good, buffer])
    assert "buffer 1" in str(caught.value)


def test_bad_buffer_sequences(ctx):
    with pytest.raises(TypeError, match="sequence"):
        ctx.reducer(numpy.zeros(3))
    with pytest.raises(TypeError, match="sequence"):
        ctx.reducer(b"bytes")
    with pytest.raises(ddpspawn.InvalidArgumentError, match="at least one"):
        ctx.reducer([])


def test_list_is_rejected_before_any_c_call(tmp_path):
    """In a fresh interpreter whose library cannot even be loaded, a list
    buffer is still a TypeError (not a LibraryLoadError)."""
    code = (
        "import ddpspawn\n"
        "try:\n"
        "    ddpspawn.Reducer(None, [[1.0, 2.0]])\n"
        "except TypeError as error:\n"
        "    print('TypeError', error)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["DDPSPAWN_LIBRARY"] = str(tmp_path / "missing" / "libddpspawn.so.1")
    env["PYTHONPATH"] = str(PACKAGE_ROOT)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("TypeError gradient buffer 0 (list)"), result.stdout


def test_no_sync_toggles_and_restores(ctx):
    with ctx.reducer([numpy.zeros(2)]) as reducer:
        assert reducer.sync
        with reducer.no_sync() as same:
            assert same is reducer and not reducer.sync
            with reducer.no_sync():
                assert not reducer.sync
            assert not reducer.sync  # the outer block still accumulates
        assert reducer.sync
        reducer.set_sync(False)
        reducer.set_sync(True)
        with pytest.raises(RuntimeError):
            with reducer.no_sync():
                raise RuntimeError("inside")
        assert reducer.sync


def test_buffers_stay_pinned_while_open(ctx):
    data = array.array("d", [1.0, 2.0])
    reducer = ctx.reducer([data])
    with pytest.raises(BufferError):
        data.append(3.0)  # would move the memory the reducer points at
    reducer.close()
    data.append(3.0)


def test_reducer_keeps_buffers_alive(ctx):
    reducer = ctx.reducer([numpy.full(4, 2.0)])
    gc.collect()
    reducer.mark_ready(0)
    reducer.finalize()
    assert reducer.buffers[0].tolist() == [2.0] * 4
    reducer.close()


def test_close_is_idempotent_and_final(ctx):
    reducer = ctx.reducer([numpy.zeros(2)])
    reducer.close()
    reducer.close()
    assert reducer.closed and "closed" in repr(reducer)
    for call in (
        lambda: reducer.mark_ready(0),
        reducer.finalize,
        lambda: reducer.set_sync(False),
        lambda: reducer.bucket_count,
        lambda: reducer.buffers,
    ):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_closing_the_context_closes_its_reducers():
    context = ddpspawn.Context.from_env(timeout=60)
    reducer = context.reducer([numpy.zeros(2)])
    context.close()
    assert reducer.closed
    with pytest.raises(ValueError, match="closed"):
        reducer.finalize()
    with pytest.raises(ValueError, match="closed"):
        context.reducer([numpy.zeros(2)])


# -- between processes ------------------------------------------------------

ORDERS = ["forward", "reverse", "random"]
# (bucket_cap_mb, first_bucket_cap_mb): the defaults, and caps so small that
# the buffers spread over many buckets.
CAPS = [(25.0, 1.0), (0.001, 0.0001)]


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("world_size", [2, 4])
def test_means_in_any_mark_order(world_size, start_method):
    per_rank = ddpspawn.spawn(
        workers.reducer_means,
        args=(ORDERS, CAPS),
        nprocs=world_size,
        start_method=start_method,
        timeout=120,
    )
    assert len(per_rank) == world_size
    for rank, results in enumerate(per_rank):
        for order in ORDERS:
            for cap, first_cap in CAPS:
                worst, buckets = results[(order, cap, first_cap)]
                where = f"rank {rank}, order {order}, caps {cap}/{first_cap}"
                assert worst == 0.0, where  # the means are exact in binary
                if cap == 25.0:
                    assert buckets == 3, where  # one per element type
                else:
                    assert buckets >= 6, where


@pytest.mark.parametrize("world_size", [2, 4])
def test_find_unused_parameters(world_size):
    per_rank = ddpspawn.spawn(
        workers.reducer_unused, args=(True,), nprocs=world_size, timeout=120
    )
    mean = (world_size + 1) / 2
    for rank, (first, second, first_written, second_written) in enumerate(per_rank):
        used, unused, partly = first
        assert first_written == [True, False, True], rank
        assert second_written == [True, True, True], rank
        assert used == [mean] * 3, rank
        assert unused == [100.0 + rank] * 4, rank  # no rank marked it: untouched
        # Only rank 1 marked it; the others count as zeros.
        assert partly == [20.0 / world_size] * 2, rank
        assert second == [[mean] * 3, [mean] * 4, [mean] * 2], rank


def test_without_find_unused_parameters_unmarked_buffers_count_as_zeros():
    per_rank = ddpspawn.spawn(workers.reducer_unused, args=(False,), nprocs=2, timeout=120)
    for rank, (first, second, first_written, second_written) in enumerate(per_rank):
        assert first_written == second_written == [True, True, True], rank
        used, unused, partly = first
        assert used == [1.5] * 3, rank
        assert unused == [0.0] * 4, rank
        assert partly == [10.0] * 2, rank
        assert second == [[1.5] * 3, [1.5] * 4, [1.5] * 2], rank


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("world_size", [2, 4])
def test_no_sync_accumulates_locally(world_size, start_method):
    per_rank = ddpspawn.spawn(
        workers.reducer_no_sync, nprocs=world_size, start_method=start_method, timeout=120
    )
    mean = (world_size + 1) / 2  # of rank + 1
    for rank, (local, inside, after, synced, plain, conditional) in enumerate(per_rank):
        assert conditional == [True, False], rank  # no_sync(False) leaves syncing on
        assert inside == (False, False) and after is True, rank  # sync, and written
        # Nothing was communicated under no_sync.
        assert local == ([2.0 * (rank + 1)] * 5, [4.0 * (rank + 1)] * 3), rank
        # The synced iteration averages the whole accumulated sum.
        assert synced == ([3 * mean] * 5, [6 * mean] * 3), rank
        assert plain == ([mean - 1] * 5, [-(mean - 1)] * 3), rank


# Relative tolerances of the compressed hooks: fp16 keeps 11 significant
# bits, bf16 8; each rounds the values a few times (compress, sum/divide).
HOOK_TOLERANCE = {"fp16": 5e-3, "bf16": 2e-2, "allreduce": 1e-6}


@pytest.mark.parametrize("hook", ["fp16", "bf16", "powersgd", "allreduce"])
@pytest.mark.parametrize("world_size", [2, 4])
def test_comm_hooks(world_size, hook):
    if hook == "powersgd":
        pytest.importorskip("torch")  # shaped gradients come as torch tensors
    per_rank = ddpspawn.spawn(
        workers.reducer_hook, args=(hook,), nprocs=world_size, timeout=120
    )
    for rank, (worst, first, (sent, dense)) in enumerate(per_rank):
        if hook == "powersgd":
            # Rank-1 factors of the 20x15 and 8x8 matrices (P and Q), the
            # float64 vector as it is: 68 of the 381 elements.
            assert (sent, dense) == (20 + 15 + 8 + 8 + 17, 300 + 17 + 64), (rank, sent, dense)
            matrix, vector, small_matrix = first
            assert vector < 1e-6, (rank, first)
            # The mean of the ranks' matrices has rank 2: its rank-1 projection
            # misses it by its second singular value at least (8e-3 of its
            # norm at 2 and 4 ranks), and never by more than the mean itself.
            assert 1e-3 < matrix <= 1.0 + 1e-5, (rank, first)
            assert 1e-3 < small_matrix <= 1.0 + 1e-5, (rank, first)
            continue
        assert worst < HOOK_TOLERANCE[hook], (rank, worst)
        if hook in ("fp16", "bf16"):
            assert worst > 1e-6, (rank, worst)  # the hook did compress


def test_batched_powersgd_compresses_flat_buffers_and_converges():
    """Flat gradients (numpy views, as the C ABI gets them): per-matrix
    PowerSGD can only send them whole; batched PowerSGD compresses each
    bucket as one square matrix, and trains about as well as the exact
    average."""
    pytest.importorskip("torch")
    runs = {hook: ddpspawn.spawn(workers.reducer_trains_flat, args=(hook,), nprocs=2,
                                 timeout=120)
            for hook in ("allreduce", "powersgd", "batched_powersgd")}
    parameters = 16 * 64 + 64 + 64 + 1
    for rank in range(2):
        before, exact, _ = runs["allreduce"][rank]
        _, _, (sent, dense) = runs["powersgd"][rank]
        assert (sent, dense) == (parameters, parameters), (rank, sent, dense)
        _, batched, (sent, dense) = runs["batched_powersgd"][rank]
        # One bucket of 1153 elements: a 34x34 square, rank 2: P and Q of
        # 34x2 each.
        assert (sent, dense) == (2 * 34 * 2, parameters), (rank, sent, dense)
        # Observed: 5.57 -> 0.180 exact, 0.223 batched (1.24x) in 150 steps,
        # sending 136 of 1153 elements a step.
        assert exact < 0.05 * before, (rank, before, exact)
        assert batched < 0.06 * before, (rank, before, batched)
        assert batched < 1.5 * exact, (rank, exact, batched)
        print(f"rank {rank}: loss {before:.4f} -> {exact:.4f} exact, {batched:.4f} batched")


def test_unknown_comm_hook_in_workers():
    with pytest.raises(ddpspawn.WorkerFailedError, match="unknown communication hook 'bogus'"):
        ddpspawn.spawn(workers.reducer_hook, args=("bogus",), nprocs=2, timeout=120)


@pytest.mark.parametrize("start_method", START_METHODS)
def test_array_memoryview_and_numpy_buffers(start_method):
    per_rank = ddpspawn.spawn(
        workers.reducer_buffer_kinds, nprocs=2, start_method=start_method, timeout=120
    )
    for rank, buffers in enumerate(per_rank):
        assert buffers == [
            [1.5] * 3,  # array.array('d')
            [3] * 2,  # array.array('i'): (2 + 4) / 2
            [1.5] * 4,  # memoryview 'f'
            [6] * 2,  # memoryview 'q': (4 + 8) / 2
            [[1.5] * 3] * 2,  # numpy float32 matrix
        ], rank


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("tensors", [False, True], ids=["numpy_views", "torch_tensors"])
def test_torch_training_matches_single_process(tensors):
    """Two ranks, each with half the batch and the gradients (p.grad.numpy(),
    or the p.grad tensors through DLPack) averaged by the reducer, reach the
    parameters that one process reaches on the whole batch."""
    outcome = ddpspawn.spawn(
        workers.torch_linear_regression, args=(5, 0.1, tensors), nprocs=2, timeout=300
    )
    assert outcome["ranks_agree"], outcome
    assert outcome["moved"] > 1e-2, outcome  # training did change the parameters
    assert outcome["max_difference"] < 1e-5, outcome


def test_powersgd_compresses_torch_matrices_and_not_flat_buffers():
    """Through the C ABI, torch tensors keep their shapes (DLPack), so PowerSGD
    sends the 32x16 weight as rank-1 factors: fewer elements, and a result
    that is the exact mean's projection (off by a bounded amount, never more
    than the mean itself). The same memory as flat numpy buffers is sent as
    it is and comes back exact."""
    shaped = ddpspawn.spawn(workers.reducer_torch_powersgd, args=(True,), nprocs=2, timeout=120)
    flat = ddpspawn.spawn(workers.reducer_torch_powersgd, args=(False,), nprocs=2, timeout=120)
    for rank in range(2):
        before, first, second = shaped[rank]
        assert before[0] == (0, 0), rank  # plain all-reduce before the start iteration
        assert before[1] < 1e-6 and before[2] < 1e-6, (rank, before)
        for compressed in (first, second):
            (sent, dense), weight_error, bias_error = compressed
            assert dense == 32 * 16 + 16, (rank, dense)
            assert sent < dense // 4, (rank, sent, dense)
            assert bias_error < 1e-6, (rank, bias_error)  # a vector is sent as it is
        assert 0.1 < first[1] <= 1.0 + 1e-5, (rank, first)  # a projection of the mean
        for (sent, dense), weight_error, bias_error in flat[rank]:
            assert sent == dense or (sent, dense) == (0, 0), (rank, sent, dense)
            assert weight_error < 1e-6 and bias_error < 1e-6, (rank, weight_error)


def test_torch_tensors_and_buffers_are_not_mixed(ctx):
    import torch

    with pytest.raises(TypeError, match="gradient buffer 1 is not a tensor, but buffer 0 is"):
        ctx.reducer([torch.zeros(2), numpy.zeros(2)])
    with pytest.raises(ddpspawn.InvalidArgumentError, match=r"gradients\[1\] is not C-contiguous"):
        ctx.reducer([torch.zeros(2), torch.zeros(3, 2).t()])
    with ctx.reducer([torch.zeros(2, 3)], comm_hook="powersgd") as reducer:
        assert reducer.compression == (0, 0)
        assert "dtypes=float32" in repr(reducer)
