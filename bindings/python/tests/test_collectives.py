"""Collectives between real worker processes, checked against values computed
here from what each rank contributed."""

import math

import pytest

import ddpspawn
import ddpspawn_test_workers as workers

START_METHODS = ["spawn", "fork", "forkserver"]

LIST_KINDS = ["list:int", "list:float"]
ARRAY_KINDS = ["array:f", "array:d", "array:i", "array:l", "array:q"]
NUMPY_KINDS = ["numpy:float32", "numpy:float64", "numpy:int32", "numpy:int64"]
MEMORYVIEW_KINDS = ["memoryview:f", "memoryview:d", "memoryview:i", "memoryview:l", "memoryview:q"]


def is_float(kind):
    return kind.split(":")[1] in ("float", "f", "d", "float32", "float64")


def expected_reduction(kind, op, world_size):
    """op over every rank's values, element by element, as the library defines it."""
    columns = list(zip(*(workers.values_for(kind, r) for r in range(world_size))))
    if op == "sum":
        return [sum(c) for c in columns]
    if op == "mean":
        if is_float(kind):
            return [sum(c) / world_size for c in columns]
        # integers truncate toward zero
        return [int(math.copysign(abs(sum(c)) // world_size, sum(c))) for c in columns]
    if op == "min":
        return [min(c) for c in columns]
    if op == "max":
        return [max(c) for c in columns]
    if op == "product":
        return [math.prod(c) for c in columns]
    raise ValueError(op)


def check_all_reduce(kinds, world_size, start_method):
    per_rank = ddpspawn.spawn(
        workers.all_reduce_kinds,
        args=(kinds,),
        nprocs=world_size,
        start_method=start_method,
        timeout=120,
    )
    assert len(per_rank) == world_size
    for rank, results in enumerate(per_rank):
        for kind in kinds:
            for op in workers.OPS:
                out, in_place, data_after = results[(kind, op)]
                expected = expected_reduction(kind, op, world_size)
                where = f"rank {rank}, {kind}, {op}"
                if is_float(kind):
                    assert out == pytest.approx(expected), where
                else:
                    assert out == expected, where
                    assert all(type(v) is int for v in out), where
                if kind.startswith("list"):
                    assert not in_place, where
                    assert data_after == workers.values_for(kind, rank), where
                else:
                    assert in_place, where
                    assert data_after == out, where


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize(
    "kinds",
    [LIST_KINDS, ARRAY_KINDS, NUMPY_KINDS, MEMORYVIEW_KINDS],
    ids=["list", "array", "numpy", "memoryview"],
)
def test_all_reduce_every_op_two_ranks(kinds, start_method):
    check_all_reduce(kinds, 2, start_method)


@pytest.mark.parametrize("start_method", START_METHODS)
def test_all_reduce_every_op_four_ranks(start_method):
    check_all_reduce(LIST_KINDS + ["numpy:float64", "array:i"], 4, start_method)


@pytest.mark.parametrize("start_method", START_METHODS)
def test_reduce_changes_only_dst(start_method):
    kinds = ["list:int", "numpy:float32", "array:q", "memoryview:d"]
    per_rank = ddpspawn.spawn(
        workers.reduce_to, args=(kinds, 1), nprocs=3, start_method=start_method
    )
    for rank, results in enumerate(per_rank):
        for kind in kinds:
            if rank == 1:
                expected = expected_reduction(kind, "sum", 3)
            else:
                expected = workers.values_for(kind, rank)
            assert results[kind] == pytest.approx(expected), (rank, kind)


def test_broadcast_buffers():
    kinds = ["list:float", "numpy:int32", "array:f", "memoryview:q"]
    per_rank = ddpspawn.spawn(workers.broadcast_buffers, args=(kinds, 1), nprocs=3)
    for results in per_rank:
        for kind in kinds:
            assert results[kind] == pytest.approx(workers.values_for(kind, 1)), kind


@pytest.mark.parametrize("start_method", START_METHODS)
def test_broadcast_object(start_method):
    received = ddpspawn.spawn(
        workers.broadcast_object_from, args=(1,), nprocs=3, start_method=start_method
    )
    assert received == [{"from": 1, "payload": list(range(100))}] * 3


@pytest.mark.parametrize("start_method", START_METHODS)
def test_all_gather(start_method):
    per_rank = ddpspawn.spawn(
        workers.all_gather_kinds, nprocs=2, start_method=start_method
    )
    assert per_rank[0] == per_rank[1]
    gathered = per_rank[0]
    assert gathered["list"] == [[0, 1], [1, 2]]
    assert gathered["array"] == [[0, 0, 0], [1, 1, 1]]
    assert gathered["array_type"] == ["i", "i"]
    assert gathered["numpy"] == [
        ("<f4", (2, 3), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
        ("<f4", (2, 3), [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]),
    ]
    assert gathered["numpy_readonly"] == [[0, 0], [1, 2]]
    assert gathered["numpy_strided"] == [[0.0, 2.0, 4.0, 6.0], [1.0, 3.0, 5.0, 7.0]]
    assert gathered["memoryview"] == [("d", [0.0, 0.0]), ("d", [1.0, -1.0])]
    assert gathered["objects"] == [{"rank": 0, "blob": ""}, {"rank": 1, "blob": "x" * 1000}]


@pytest.mark.parametrize("start_method", START_METHODS)
def test_barrier(tmp_path, start_method):
    seen = ddpspawn.spawn(
        workers.barrier_orders, args=(str(tmp_path),), nprocs=2, start_method=start_method
    )
    assert seen == [True, True]


@pytest.mark.parametrize("start_method", START_METHODS)
def test_torch_tensors_go_through_dlpack_in_place(start_method):
    per_rank, mismatch = ddpspawn.spawn(
        workers.torch_tensor_collectives, nprocs=2, start_method=start_method, timeout=120
    )
    assert len(per_rank) == 2
    for rank, seen in enumerate(per_rank):
        where = f"rank {rank}"
        # The caller's tensor itself, at the same address: no copy in or out.
        assert seen["matrix"] == (True, True, [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]]), where
        for dtype in ("torch.float64", "torch.float16", "torch.bfloat16", "torch.int64",
                      "torch.int32", "torch.int8", "torch.uint8"):
            assert seen[dtype] == [3, 4], (where, dtype)
        assert seen["row"] == [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]], where
        assert seen["broadcast"] == ([1.0, 1.0, 1.0], [True, False]), where
        assert seen["reduce"] == ([0.5, 1.0] if rank == 0 else [1.0, 1.0]), where
        assert seen["gather"] == [((1, 2), "torch.int64", [[0, 10]]),
                                  ((1, 2), "torch.int64", [[1, 11]])], where
        refused = seen["refused"]
        assert refused["transposed"][0] == "InvalidArgumentError", where
        assert "tensor is not C-contiguous (dimension 1 has stride 3" in refused["transposed"][1]
        assert refused["complex"][0] == "InvalidArgumentError", where
        assert "unsupported element type (DLPack code 5, 64 bits" in refused["complex"][1]
        assert refused["requires_grad"][0] == "ValueError", where
        assert "could not be passed through DLPack" in refused["requires_grad"][1]
    # Rank 0's error for a call whose dtype differs between the ranks names both.
    assert "float32" in mismatch and "float64" in mismatch, mismatch
