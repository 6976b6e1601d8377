"""Communication hooks written in Python (``comm_hook=callable``): the
reducer calls them for every bucket, in order, with a lent context; their
errors name the rank, the bucket and the exception; and they train, on numpy
buffers and through ddpspawn.torch.DistributedDataParallel, between real
worker processes."""

import gc
import weakref

import numpy
import pytest

import ddpspawn
import ddpspawn_hook_workers as workers


def _run_once(reducer, count):
    for k in reversed(range(count)):
        reducer.mark_ready(k)
    reducer.finalize()


# -- a group of one ----------------------------------------------------------


def test_the_hook_gets_every_bucket_in_order_and_its_result_stays(ctx):
    buffers = [numpy.arange(300, dtype=numpy.float32), numpy.arange(5, dtype=numpy.float64),
               numpy.arange(400, dtype=numpy.float32)]
    seen = []

    def triple(context, bucket):
        seen.append((bucket.index, bucket.bucket_count, bucket.dtype, len(bucket.data)))
        context.all_reduce(bucket.data, "mean")  # a group of one: unchanged
        numpy.frombuffer(bucket.data, dtype=bucket.dtype)[:] *= 3

    # Caps of 1 KiB: the 400 and 300 float32s get a bucket each, the float64s their own.
    with ctx.reducer(buffers, comm_hook=triple, bucket_cap_mb=1 / 1024,
                     first_bucket_cap_mb=1 / 1024) as reducer:
        _run_once(reducer, len(buffers))
        assert reducer.bucket_count == 3
    assert [s[0] for s in seen] == [0, 1, 2]
    assert {s[1] for s in seen} == {3}
    assert sorted((s[2], s[3]) for s in seen) == [("float32", 300), ("float32", 400),
                                                  ("float64", 5)]
    for buffer, size in zip(buffers, (300, 5, 400)):
        numpy.testing.assert_array_equal(buffer, 3 * numpy.arange(size))


def test_a_failing_hook_names_the_rank_the_bucket_and_the_exception(ctx):
    def failing(context, bucket):
        raise ValueError("the hook gave up")

    buffers = [numpy.ones(4, numpy.float32)]
    with ctx.reducer(buffers, comm_hook=failing) as reducer:
        with pytest.raises(ddpspawn.InternalError,
                           match=r"rank 0: .*bucket 0.*ValueError: the hook gave up"):
            _run_once(reducer, 1)


@pytest.mark.parametrize("error", [
    ddpspawn.DdpspawnTimeoutError("a peer was too slow", status=3),  # a failed collective's
    ddpspawn.InvalidArgumentError("a peer was too slow"),  # ddpspawn's own check: no status
], ids=["with_status", "without_status"])
def test_a_hooks_ddpspawn_error_keeps_its_kind(ctx, error):
    def failing(context, bucket):
        raise error

    with ctx.reducer([numpy.ones(4, numpy.float32)], comm_hook=failing) as reducer:
        with pytest.raises(type(error), match="a peer was too slow"):
            _run_once(reducer, 1)


def test_an_exception_that_cannot_be_printed_is_still_an_error(ctx):
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    def failing(context, bucket):
        raise Unprintable()

    with ctx.reducer([numpy.ones(4, numpy.float32)], comm_hook=failing) as reducer:
        with pytest.raises(ddpspawn.InternalError, match="the Python comm hook failed"):
            _run_once(reducer, 1)


def test_keyboard_interrupt_in_a_hook_stays_one(ctx):
    def interrupted(context, bucket):
        raise KeyboardInterrupt

    with ctx.reducer([numpy.ones(4, numpy.float32)], comm_hook=interrupted) as reducer:
        with pytest.raises(KeyboardInterrupt):
            _run_once(reducer, 1)


def test_the_lent_context_and_view_are_closed_after_the_call(ctx):
    kept = []

    def keep(context, bucket):
        kept.append((context, bucket.data))

    with ctx.reducer([numpy.ones(4, numpy.float32)], comm_hook=keep) as reducer:
        _run_once(reducer, 1)
    context, data = kept[0]
    assert context.closed
    with pytest.raises(ValueError, match="closed"):
        context.all_reduce(numpy.ones(1))
    with pytest.raises(ValueError, match="released"):
        data[0] = 1.0
    assert not ctx.closed and ctx.world_size == 1  # the group itself is untouched


def test_the_reducer_lets_go_of_its_hook_when_closed(ctx):
    class Hook:
        def __call__(self, context, bucket):
            pass

    hook = Hook()
    alive = weakref.ref(hook)
    reducer = ctx.reducer([numpy.ones(4, numpy.float32)], comm_hook=hook)
    del hook
    gc.collect()
    assert alive() is not None  # the reducer may still call it
    _run_once(reducer, 1)
    reducer.close()
    gc.collect()
    assert alive() is None


def test_comm_hook_is_a_name_or_a_callable(ctx):
    with pytest.raises(ddpspawn.InvalidArgumentError, match="a callable"):
        ctx.reducer([numpy.ones(4, numpy.float32)], comm_hook=3)


# -- between worker processes --------------------------------------------------


def test_the_hooks_collective_runs_across_the_ranks():
    per_rank = ddpspawn.spawn(workers.max_of_ranks, nprocs=3, timeout=120)
    for values in per_rank:
        # max over ranks 0..2 of rank + 1 and of -rank: 3 and 0, not the means 2 and -1.
        assert values == [[3.0] * 7, [0.0] * 3], per_rank


def test_a_python_mean_hook_trains_exactly_as_the_builtin_one():
    pytest.importorskip("torch")
    builtin = ddpspawn.spawn(workers.wrapper_trains, args=("allreduce",), nprocs=2, timeout=120)
    python = ddpspawn.spawn(workers.wrapper_trains, args=("mean",), nprocs=2, timeout=120)
    for rank in range(2):
        before, after, weights, (calls, buckets) = python[rank]
        assert calls == 60 * buckets, (rank, calls, buckets)  # the hook averaged every bucket
        assert after < 0.2 * before, (rank, before, after)
        # The same sums in the same order: bit for bit.
        assert weights == builtin[rank][2], rank
    assert python[0][2] == python[1][2]


def test_a_topk_hook_with_error_feedback_trains_sending_a_fraction():
    pytest.importorskip("torch")
    exact = ddpspawn.spawn(workers.wrapper_trains, args=("allreduce",), nprocs=2, timeout=120)
    topk = ddpspawn.spawn(workers.wrapper_trains, args=("topk",), nprocs=2, timeout=120)
    parameters = 16 * 64 + 64 + 64 + 1
    for rank in range(2):
        before, after, weights, (sent, dense) = topk[rank]
        # One bucket of 1153 elements a step, 64 of them sent.
        assert dense == 60 * parameters and sent == 60 * 64, (sent, dense)
        exact_after = exact[rank][1]
        print(f"rank {rank}: loss {before:.4f} -> {after:.4f} top-k, {exact_after:.4f} exact")
        assert after < 0.5 * before, (rank, before, after)
    assert topk[0][2] == topk[1][2]  # every rank applied the same sparse mean


def test_the_torch_wrapper_refuses_a_python_hook_off_the_cpu(ctx):
    torch = pytest.importorskip("torch")
    import ddpspawn.torch

    off_cpu = torch.nn.Linear(3, 2, device="meta")  # what a CUDA module meets, without a GPU
    with pytest.raises(ddpspawn.InvalidArgumentError, match="parameters on meta"):
        ddpspawn.torch.DistributedDataParallel(off_cpu, ctx, comm_hook=workers.mean_hook)
