"""Tests of Context in this very process: a group of one joined from an
environment without any launcher, torchrun or SLURM variables, plus the
argument checks that happen before any collective runs."""

import array

import numpy
import pytest

import ddpspawn


def test_single_process_without_environment(ctx):
    assert (ctx.rank, ctx.world_size) == (0, 1)
    assert (ctx.local_rank, ctx.local_world_size, ctx.node_rank) == (0, 1, 0)
    assert ctx.environment == "env"
    assert "world_size=1" in repr(ctx)


def test_collectives_in_a_group_of_one(ctx):
    ctx.barrier()
    ctx.barrier("named")
    assert ctx.all_reduce([1, 2, 3], op="product") == [1, 2, 3]
    data = numpy.array([1.5, 2.5])
    assert ctx.all_reduce(data, op="mean") is data
    assert data.tolist() == [1.5, 2.5]
    assert ctx.reduce(array.array("i", [4]), op="max").tolist() == [4]
    assert ctx.broadcast([7.0]) == [7.0]
    assert ctx.broadcast_object({"a": 1}) == {"a": 1}
    assert ctx.all_gather_object(("x", 1)) == [("x", 1)]
    [gathered] = ctx.all_gather(numpy.ones((2, 2), dtype=numpy.int32))
    assert gathered.dtype == numpy.int32 and gathered.tolist() == [[1, 1], [1, 1]]
    assert ctx.all_reduce([]) == []


def test_list_types(ctx):
    ints = ctx.all_reduce([1, 2])
    floats = ctx.all_reduce([1, 2.0])
    assert [type(v) for v in ints] == [int, int]
    assert [type(v) for v in floats] == [float, float]


@pytest.mark.parametrize(
    "data",
    [
        numpy.zeros(3, dtype=numpy.float16),
        numpy.zeros(3, dtype=numpy.uint32),
        numpy.zeros(3, dtype=numpy.bool_),
        numpy.zeros(3, dtype=">f8"),
        array.array("h", [1, 2]),
        memoryview(bytearray(8)),  # format "B"
    ],
    ids=["float16", "uint32", "bool", "big-endian", "array-h", "memoryview-B"],
)
def test_unsupported_element_types(ctx, data):
    with pytest.raises(TypeError, match="unsupported element type"):
        ctx.all_reduce(data)


def test_unsupported_objects(ctx):
    with pytest.raises(TypeError, match="unsupported data"):
        ctx.all_reduce({"a": 1})
    with pytest.raises(TypeError, match="only numbers"):
        ctx.all_reduce([1, "2"])


def test_in_place_needs_writable_contiguous_buffers(ctx):
    readonly = numpy.zeros(4)
    readonly.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        ctx.all_reduce(readonly)
    with pytest.raises(ValueError, match="read-only"):
        ctx.broadcast(memoryview(array.array("d", [1.0]).tobytes()).cast("d"))
    with pytest.raises(ValueError, match="not C-contiguous"):
        ctx.all_reduce(numpy.zeros((4, 4))[:, 1])
    with pytest.raises(ValueError, match="not C-contiguous"):
        ctx.reduce(memoryview(array.array("q", range(6)))[::2])


def test_unknown_op(ctx):
    with pytest.raises(ddpspawn.InvalidArgumentError, match="unknown reduce op"):
        ctx.all_reduce([1], op="avg")
    with pytest.raises(ValueError):
        ctx.reduce([1], op=None)


def test_bad_ranks_are_invalid_arguments(ctx):
    with pytest.raises(ddpspawn.InvalidArgumentError):
        ctx.broadcast([1.0], src=1)
    with pytest.raises(ddpspawn.InvalidArgumentError):
        ctx.reduce([1.0], dst=-1)
    with pytest.raises(ddpspawn.InvalidArgumentError):
        ctx.broadcast_object("x", src=3)


def test_close_is_deterministic_and_idempotent():
    context = ddpspawn.Context.from_env(timeout=60)
    assert not context.closed
    context.close()
    context.close()
    assert context.closed
    assert "closed" in repr(context)
    with pytest.raises(ValueError, match="closed"):
        context.barrier()
    with pytest.raises(ValueError, match="closed"):
        context.rank


def test_unknown_backend():
    with pytest.raises(ddpspawn.DdpspawnError, match="bogus"):
        ddpspawn.Context(backend="bogus")


def test_bad_timeout():
    with pytest.raises(ddpspawn.InvalidArgumentError):
        ddpspawn.Context(timeout=-1)
