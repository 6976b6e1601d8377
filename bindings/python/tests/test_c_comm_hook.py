"""Communication hooks written in C, from Python (ddpspawn.CCommHook): the reducer calls the
library's functions for every bucket (mean_hook.c: ddpspawn's all-reduce, then a scale its state
holds), makes and releases the hook's state, reports the hook's own error, refuses a library or a
function that is not there, and trains between spawned ranks (the hook pickled by name) to the
weights of the built-in mean."""

import ctypes
import os
from pathlib import Path

import numpy
import pytest

import ddpspawn
import ddpspawn_hook_workers as workers

REPO = Path(__file__).resolve().parents[3]


def hook_library():
    """mean_hook.c built by Bazel: in the test's runfiles, or under bazel-bin for a direct run."""
    for candidate in (Path("bindings/python/libmean_hook.so"),
                      REPO / "bazel-bin" / "bindings" / "python" / "libmean_hook.so"):
        if candidate.exists():
            return str(candidate.resolve())
    pytest.fail("libmean_hook.so is not built: bazel build //bindings/python:libmean_hook.so")


def hook(**functions):
    names = dict(release="mean_hook_release", make_user_data="mean_hook_make")
    names.update(functions)
    return ddpspawn.CCommHook(hook_library(), "mean_hook_start", **names)


def c_function(name, restype=ctypes.c_longlong, argtypes=()):
    function = getattr(ctypes.CDLL(hook_library()), name)
    function.restype, function.argtypes = restype, list(argtypes)
    return function


def run_once(reducer, count):
    for k in reversed(range(count)):
        reducer.mark_ready(k)
    reducer.finalize()


def test_the_c_hook_averages_every_bucket_with_its_own_state(ctx):
    averaged = c_function("mean_hook_buckets_averaged")
    released = c_function("mean_hook_states_released")
    scale_next = c_function("mean_hook_scale_next", None, [ctypes.c_float])
    buffers = [numpy.arange(300, dtype=numpy.float32), numpy.arange(400, dtype=numpy.float32)]
    before, released_before = averaged(), released()
    scale_next(3.0)  # the state the reducer makes scales by 3: the C hook, not the built-in mean
    try:
        with ctx.reducer(buffers, comm_hook=hook(), bucket_cap_mb=1 / 1024,
                         first_bucket_cap_mb=1 / 1024) as reducer:
            run_once(reducer, len(buffers))
            assert reducer.bucket_count == 2
    finally:
        scale_next(1.0)
    assert averaged() - before == 2
    assert released() - released_before == 1  # its state, once, when the reducer went
    # A group of one: the mean is the value, times the state's 3.
    assert numpy.array_equal(buffers[0], 3 * numpy.arange(300, dtype=numpy.float32))
    assert numpy.array_equal(buffers[1], 3 * numpy.arange(400, dtype=numpy.float32))


def test_the_c_hooks_error_reaches_the_caller(ctx):
    buffers = [numpy.zeros(4, dtype=numpy.float64)]
    with ctx.reducer(buffers, comm_hook=hook()) as reducer:
        with pytest.raises(ddpspawn.DdpspawnError, match="mean_hook averages float32"):
            run_once(reducer, 1)


def test_what_is_not_there_is_refused_by_name(ctx):
    buffers = [numpy.zeros(4, dtype=numpy.float32)]
    with pytest.raises(ddpspawn.InvalidArgumentError, match="cannot load /nonexistent/hook.so"):
        ctx.reducer(buffers, comm_hook=ddpspawn.CCommHook("/nonexistent/hook.so", "start"))
    with pytest.raises(ddpspawn.InvalidArgumentError, match="exports no function 'no_such'"):
        ctx.reducer(buffers, comm_hook=hook(wait="no_such"))
    with pytest.raises(ddpspawn.InvalidArgumentError, match="start must be a non-empty str"):
        ddpspawn.CCommHook(hook_library(), "")
    # A failed creation releases the state it made (ddpspawn.h leaves it to the caller).
    released = c_function("mean_hook_states_released")
    before = released()
    closed = ddpspawn.Context()
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        closed.reducer(buffers, comm_hook=hook())
    assert released() - before == 1
    # A function that is not there is found missing before any state is made.
    with pytest.raises(ddpspawn.InvalidArgumentError, match="no_such"):
        ctx.reducer(buffers, comm_hook=hook(release="no_such"))
    assert released() - before == 1


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_the_c_hook_trains_between_ranks_as_the_built_in_mean(start_method):
    pytest.importorskip("torch")
    builtin = ddpspawn.spawn(workers.wrapper_trains, args=("allreduce",), nprocs=2, timeout=120,
                             start_method=start_method)
    trained, averaged = ddpspawn.spawn(workers.c_hook_trains, args=(hook(),), nprocs=2,
                                       timeout=120, start_method=start_method)
    for rank in range(2):
        before, after, weights, _ = trained[rank]
        assert averaged[rank] >= 60, averaged  # the C hook averaged every step's buckets
        assert after < 0.2 * before, (rank, before, after)
        # ddpspawn's mean all-reduce, as the built-in hook's: the same sums in the same order, bit
        # for bit.
        assert weights == builtin[rank][2], rank
    assert trained[0][2] == trained[1][2]
