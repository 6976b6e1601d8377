"""Worker functions for the tests, at module level so that spawn-mode workers
can import them by name. Each takes the Context first, as ddpspawn.spawn
passes it."""

import array
import faulthandler
import os
import resource
import signal
import time
from pathlib import Path

import numpy

import ddpspawn

OPS = ("sum", "mean", "min", "max", "product")


# -- values each rank contributes; the tests compute the expected reductions --


def int_values(rank):
    return [rank + 1, -(rank + 2), 3 * rank, 7, -5 * (rank + 1)]


def float_values(rank):
    return [rank + 1.5, -(rank + 0.5), 2.0 * rank, 0.25, -3.0]


def values_for(kind, rank):
    """Python values for a data kind named like "array:d" or "numpy:int32"."""
    element = kind.split(":")[1]
    is_float = element in ("float", "f", "d", "float32", "float64")
    return float_values(rank) if is_float else int_values(rank)


def make_data(kind, rank):
    """The object a rank passes to a collective, for a kind such as
    "list:int", "list:float", "array:q", "numpy:float32" or "memoryview:i"."""
    container, element = kind.split(":")
    values = values_for(kind, rank)
    if container == "list":
        return values
    if container == "array":
        return array.array(element, values)
    if container == "numpy":
        return numpy.array(values, dtype=element)
    if container == "memoryview":
        view = memoryview(bytearray(array.array(element, values).tobytes()))
        return view.cast(element)
    raise ValueError(kind)


def as_list(data):
    if isinstance(data, numpy.ndarray):
        return data.tolist()
    if isinstance(data, (array.array, memoryview)):
        return data.tolist()
    return list(data)


# -- workers ---------------------------------------------------------------


def describe(ctx, value=None):
    """Rank 0 returns what every rank saw of itself."""
    seen = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "local_world_size": ctx.local_world_size,
        "node_rank": ctx.node_rank,
        "environment": ctx.environment,
        "is_worker": ddpspawn.is_worker(),
        "env_rank": os.environ.get("RANK"),
        "extra_env": os.environ.get("DDPSPAWN_TEST_VAR"),
        "value": value,
    }
    return ctx.all_gather_object(seen)


def return_value(ctx, value):
    return value if ctx.rank == 0 else "not rank 0"


def return_nothing(ctx):
    return None


def process_facts(ctx):
    """Who forked this rank, and whether the interpreter's signal handling is
    its own (KeyboardInterrupt on SIGINT, SIGPIPE ignored at the C level)."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the signal arrives at once; without a handler it kills
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    ignored = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            ignored = int(line.split()[1], 16)
    return {
        "parent": os.getppid(),
        "keyboard_interrupt": interrupted,
        "sigpipe_ignored": bool(ignored & (1 << (signal.SIGPIPE - 1))),
    }


def all_reduce_kinds(ctx, kinds):
    """For each kind and op: the result as a list, and whether a buffer was
    reduced in place (the returned object is the one passed in)."""
    results = {}
    for kind in kinds:
        for op in OPS:
            data = make_data(kind, ctx.rank)
            out = ctx.all_reduce(data, op=op)
            in_place = out is data
            results[(kind, op)] = (as_list(out), in_place, as_list(data))
    return ctx.all_gather_object(results)


def reduce_to(ctx, kinds, dst):
    results = {}
    for kind in kinds:
        data = make_data(kind, ctx.rank)
        out = ctx.reduce(data, op="sum", dst=dst)
        results[kind] = as_list(out)
    return ctx.all_gather_object(results)


def broadcast_buffers(ctx, kinds, src):
    results = {}
    for kind in kinds:
        results[kind] = as_list(ctx.broadcast(make_data(kind, ctx.rank), src=src))
    return ctx.all_gather_object(results)


def broadcast_object_from(ctx, src):
    obj = {"from": ctx.rank, "payload": list(range(ctx.rank * 100))}
    received = ctx.broadcast_object(obj if ctx.rank == src else None, src=src)
    return ctx.all_gather_object(received)


def all_gather_kinds(ctx):
    """Every rank gathers several kinds; rank 0 returns all ranks' results."""
    rank = ctx.rank
    matrix = numpy.arange(6, dtype=numpy.float32).reshape(2, 3) + 10 * rank
    readonly = numpy.array([rank, rank * 2], dtype=numpy.int64)
    readonly.setflags(write=False)
    strided = numpy.arange(8, dtype=numpy.float64)[::2] + rank
    gathered = {
        "list": ctx.all_gather([rank, rank + 1]),
        "array": [a.tolist() for a in ctx.all_gather(array.array("i", [rank] * 3))],
        "array_type": [a.typecode for a in ctx.all_gather(array.array("i", [rank]))],
        "numpy": [(a.dtype.str, a.shape, a.tolist()) for a in ctx.all_gather(matrix)],
        "numpy_readonly": [a.tolist() for a in ctx.all_gather(readonly)],
        "numpy_strided": [a.tolist() for a in ctx.all_gather(strided)],
        "memoryview": [
            (m.format, m.tolist())
            for m in ctx.all_gather(
                memoryview(bytearray(array.array("d", [rank, -rank]).tobytes())).cast("d")
            )
        ],
        "objects": ctx.all_gather_object({"rank": rank, "blob": "x" * (1000 * rank)}),
    }
    return ctx.all_gather_object(gathered)


def barrier_orders(ctx, directory):
    """Rank 1 writes a file late, before the barrier; rank 0 looks for it
    after the barrier."""
    marker = Path(directory) / "rank1-before-barrier"
    if ctx.rank == 1:
        time.sleep(0.5)
        marker.write_text("here")
    ctx.barrier("after-marker")
    seen = marker.exists()
    ctx.barrier()
    return ctx.all_gather_object(seen)


def _inner_failure(message):
    raise RuntimeError(message)


def raise_in_rank(ctx, rank, message):
    """Rank `rank` raises; the others wait to be stopped by the launcher."""
    if ctx.rank == rank:
        _inner_failure(message)
    time.sleep(60)


def report_then_hang(ctx, rank, text):
    """Rank `rank` reports `text` as its error and then hangs, as a rank whose
    exit hangs; the others fail once it has reported, so the launcher stops it."""
    if ctx.rank == rank:
        ddpspawn._lib.lib().ddpspawn_worker_set_error(text.encode())
    ctx.barrier()
    if ctx.rank == rank:
        time.sleep(60)
    raise RuntimeError(f"rank {rank} failed, so this rank stops")


def exit_in_rank(ctx, rank, code):
    if ctx.rank == rank:
        os._exit(code)
    time.sleep(60)


def segfault_in_rank(ctx, rank):
    if ctx.rank == rank:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
        faulthandler.disable()  # pytest's, inherited in fork mode: no dump
        os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(60)


def hang(ctx):
    time.sleep(600)


def touch_and_hang(ctx, directory):
    """Tells the test it is running (a file per rank), then hangs."""
    (Path(directory) / f"rank{ctx.rank}.started").write_text("")
    time.sleep(600)


def write_marker(ctx, path):
    Path(path).write_text("ran")


def torch_tensor_collectives(ctx):
    """torch tensors straight into the collectives (DLPack); what each rank saw."""
    import torch

    rank = ctx.rank
    seen = {}
    matrix = torch.arange(6, dtype=torch.float32).reshape(2, 3) * (rank + 1)
    address = matrix.data_ptr()
    returned = ctx.all_reduce(matrix)
    seen["matrix"] = (returned is matrix, matrix.data_ptr() == address, matrix.tolist())
    for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                  torch.int8, torch.uint8):
        values = torch.tensor([rank + 1, 2 * rank + 1], dtype=dtype)
        ctx.all_reduce(values)
        seen[str(dtype)] = values.tolist()
    # A contiguous slice of a larger tensor: only that row changes.
    rows = torch.zeros(3, 2)
    rows[1] = rank + 1.0
    ctx.all_reduce(rows[1], "max")
    seen["row"] = rows.tolist()
    broadcast = torch.full((3,), float(rank))
    ctx.broadcast(broadcast, src=1)
    flags = torch.tensor([rank == 1, False])
    ctx.broadcast(flags, src=1)
    seen["broadcast"] = (broadcast.tolist(), flags.tolist())
    to_zero = torch.tensor([float(rank), 1.0], dtype=torch.float64)
    ctx.reduce(to_zero, "mean", dst=0)
    seen["reduce"] = to_zero.tolist()
    gathered = ctx.all_gather(torch.tensor([[rank, 10 + rank]]))
    seen["gather"] = [(tuple(g.shape), str(g.dtype), g.tolist()) for g in gathered]
    refused = {}
    for name, tensor in (
        ("transposed", torch.ones(2, 3).t()),
        ("complex", torch.ones(2, dtype=torch.complex64)),
        ("requires_grad", torch.ones(2, requires_grad=True)),
    ):
        try:
            ctx.all_reduce(tensor)
            refused[name] = None
        except ValueError as error:  # InvalidArgumentError is one too
            refused[name] = (type(error).__name__, str(error))
    seen["refused"] = refused
    per_rank = ctx.all_gather_object(seen)
    # Different dtypes on the ranks: an error on every rank, naming both calls.
    try:
        ctx.all_reduce(torch.ones(4, dtype=torch.float32 if rank == 0 else torch.float64))
        mismatch = None
    except ddpspawn.DdpspawnError as error:
        mismatch = str(error)
    return per_rank, mismatch



def slowed_all_reduces(ctx, slow, rounds=20):
    """Rank ``slow`` sleeps 10 ms before each of ``rounds`` all-reduces; every
    rank returns what its context's straggler report says then."""
    import time

    for _ in range(rounds):
        if ctx.rank == slow:
            time.sleep(0.01)
        ctx.all_reduce([1.0])
    return ctx.straggler_report()


def fail_first_start(ctx, rank):
    """Rank `rank` fails in the first start; every start returns its number
    (TORCHELASTIC_RESTART_COUNT) and the world size."""
    generation = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if generation == 0 and ctx.rank == rank:
        raise RuntimeError(f"rank {rank} fails in start 0")
    return {"generation": generation, "world": ctx.world_size}
