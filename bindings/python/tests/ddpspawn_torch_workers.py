"""Worker functions for test_torch_ddp.py: torch models trained with
ddpspawn.torch.DistributedDataParallel in spawned ranks (importable by module
name in the workers)."""

import os
import struct
from pathlib import Path

import torch

import ddpspawn.torch

PER_RANK = 6
STEPS = 4


def make_model():
    torch.manual_seed(3)  # the same initial parameters everywhere
    return torch.nn.Sequential(
        torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.Tanh(),
        torch.nn.Linear(8, 2),
    )


def make_data(world_size):
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(world_size * PER_RANK, 5, generator=generator)
    y = torch.stack([x.sum(1).sin(), x[:, 0] * x[:, 1]], dim=1)
    return x, y


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train(model, x, y, micro_batches=1, accumulate=None):
    """STEPS optimizer steps (SGD with momentum, zero_grad to None); each step
    runs `micro_batches` backward passes over equal slices of x (the last
    synchronized, the others inside `accumulate`, e.g. no_sync). Returns how
    many gradients were already handed over when backward reached the input
    (the first step's), or None for a model that is not wrapped."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    handed_over = None
    for step in range(STEPS):
        optimizer.zero_grad()
        for part, (xs, ys) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches))):
            xs = xs.clone().requires_grad_(True)
            if step == 0 and part == micro_batches - 1 and hasattr(model, "_marked"):
                # The input's gradient is computed last in backward: by then
                # the later layers' gradients are with the reducer.
                def seen(_grad, model=model):
                    nonlocal handed_over
                    handed_over = sum(model._marked)

                xs.register_hook(seen)
            loss = torch.nn.functional.mse_loss(model(xs), ys) / micro_batches
            if part < micro_batches - 1 and accumulate is not None:
                with accumulate():
                    loss.backward()
            else:
                loss.backward()
        optimizer.step()
    return handed_over


def ddp_matches(ctx, store_dir, micro_batches):
    """Rank r trains its contiguous shard with ddpspawn's DDP and, for
    comparison, with PyTorch's own DDP (gloo, file store); rank 0 also trains
    one process on the whole batch. Returns rank 0's comparison."""
    torch.set_num_threads(1)
    rank, world = ctx.rank, ctx.world_size
    x, y = make_data(world)
    shard = slice(rank * PER_RANK, (rank + 1) * PER_RANK)

    model = ddpspawn.torch.DistributedDataParallel(make_model(), ctx, bucket_cap_mb=0.0002)
    handed_over = train(model, x[shard], y[shard], micro_batches, model.no_sync)
    buckets = model.reducer.bucket_count
    ours = flat(model.module)
    model.close()

    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store_dir}/store", rank=rank, world_size=world
    )
    theirs_model = torch.nn.parallel.DistributedDataParallel(make_model())
    train(theirs_model, x[shard], y[shard], micro_batches, theirs_model.no_sync)
    theirs = flat(theirs_model.module)
    torch.distributed.destroy_process_group()

    everyone = ctx.all_gather_object(ours.tolist())
    if rank != 0:
        return None
    alone = make_model()
    train(alone, x, y, micro_batches)
    return {
        "vs_single_process": float((ours - flat(alone)).abs().max()),
        "vs_torch_ddp": float((ours - theirs).abs().max()),
        "moved": float((flat(alone) - flat(make_model())).abs().max()),
        "ranks_agree": all(p == everyone[0] for p in everyone),
        "buckets": buckets,
        "handed_over": handed_over,
        "parameters": len(list(model.module.parameters())),
    }


def collectives_started(rank):
    """How many collectives this process has started, over its process groups:
    the `started` counter of each flight recorder it keeps in the launcher's
    run directory (core/trace/flight_recorder.cc: magic "ddpfr01", pid, started,
    finished at the start of rank<R>.group<G>.calls)."""
    total, found = 0, 0
    for path in Path(os.environ["DDPSPAWN_RUN_DIR"]).glob(f"rank{rank}.group*.calls"):
        magic, pid, started, _ = struct.unpack_from("<8sqQQ", path.read_bytes())
        if magic == b"ddpfr01\0" and pid == os.getpid():
            total, found = total + started, found + 1
    assert found, f"no flight recorder of pid {os.getpid()} in DDPSPAWN_RUN_DIR"
    return total


def no_sync_collectives(ctx):
    """The collectives this rank started during a backward inside no_sync, and
    during the synchronized backward after it; and the reducer's bucket count."""
    torch.set_num_threads(1)
    x, y = make_data(ctx.world_size)
    shard = slice(ctx.rank * PER_RANK, (ctx.rank + 1) * PER_RANK)
    model = ddpspawn.torch.DistributedDataParallel(make_model(), ctx, bucket_cap_mb=0.0002)

    def backward():
        torch.nn.functional.mse_loss(model(x[shard]), y[shard]).backward()

    before = collectives_started(ctx.rank)
    with model.no_sync():
        backward()
    inside = collectives_started(ctx.rank) - before
    before = collectives_started(ctx.rank)
    backward()
    synced = collectives_started(ctx.rank) - before
    buckets = model.reducer.bucket_count
    model.close()
    return ctx.all_gather_object((inside, synced, buckets))


def no_sync_on_rank_zero_only(ctx):
    """Rank 0 accumulates one backward under no_sync before a synchronized
    one, rank 1 synchronizes its first: what each rank's backward raised (the
    ranks left the refused call together, so the group still gathers)."""
    torch.set_num_threads(1)
    x, y = make_data(ctx.world_size)
    shard = slice(ctx.rank * PER_RANK, (ctx.rank + 1) * PER_RANK)
    model = ddpspawn.torch.DistributedDataParallel(make_model(), ctx)

    def backward():
        torch.nn.functional.mse_loss(model(x[shard]), y[shard]).backward()

    message = "no error"
    try:
        if ctx.rank == 0:
            with model.no_sync():
                backward()
        backward()
    except Exception as error:  # noqa: BLE001  # the test reads its text
        message = f"{type(error).__name__}: {error}"
    model.close()
    return ctx.all_gather_object(message)


class Branches(torch.nn.Module):
    """`shared` is used by every rank, `odd` by rank 1 only, `never` by none."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.shared = torch.nn.Linear(3, 1)
        self.odd = torch.nn.Linear(3, 1)
        self.never = torch.nn.Linear(3, 1)

    def forward(self, x, rank):
        out = self.shared(x)
        return out + self.odd(x) if rank == 1 else out


def unused_parameters(ctx, find_unused):
    """One backward per rank after zero_grad(set_to_none=True); returns each
    rank's gradients (None where a parameter has none) and what rank 1
    alone computed for `odd`."""
    rank = ctx.rank
    model = ddpspawn.torch.DistributedDataParallel(
        Branches(), ctx, find_unused_parameters=find_unused
    )
    x = torch.arange(6.0).reshape(2, 3) / (rank + 1)
    for p in model.parameters():
        p.grad = None
    model(x, rank).sum().backward()
    grads = {
        name: None if p.grad is None else p.grad.flatten().tolist()
        for name, p in model.module.named_parameters()
    }
    local_odd = None
    if rank == 1:
        alone = Branches()
        alone(x, 1).sum().backward()
        local_odd = alone.odd.weight.grad.flatten().tolist()
    model.close()
    return ctx.all_gather_object((grads, local_odd))


class WithOffset(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        self.register_buffer("offset", torch.zeros(1))

    def forward(self, x):
        return self.linear(x) + self.offset


def rank_zero_state(ctx, broadcast_buffers):
    """Every rank starts with its own weights; after wrapping, rank 1 changes
    its buffer. Returns each rank's weights after wrapping, and the buffer
    that a training forward saw."""
    torch.manual_seed(ctx.rank)
    module = WithOffset()
    model = ddpspawn.torch.DistributedDataParallel(
        module, ctx, broadcast_buffers=broadcast_buffers
    )
    weights = flat(module).tolist()
    if ctx.rank == 1:
        module.offset.fill_(5.0)
    model(torch.ones(1, 2))
    seen = module.offset.item()
    model.close()
    return ctx.all_gather_object((weights, seen))


def refusals(ctx):
    """The wrapper's refusals: (exception type, whether it names the cause)."""
    cases = [
        (lambda: (torch.nn.Linear(2, 2),
                  {"gradient_as_bucket_view": True, "find_unused_parameters": True}),
         "gradient_as_bucket_view"),
        (lambda: (torch.nn.Linear(2, 2).requires_grad_(False), {}), "no parameter that requires"),
        (lambda: ((lambda x: x), {}), "torch.nn.Module"),
        (lambda: (torch.nn.Embedding(4, 2, sparse=True), {}), "sparse gradients"),
    ]
    errors = []
    for make, cause in cases:
        module, options = make()
        try:
            ddpspawn.torch.DistributedDataParallel(module, ctx, **options)
            errors.append(None)
        except Exception as error:  # noqa: BLE001 - the test reads the type
            errors.append((type(error).__name__, cause in str(error)))
    return errors


def torch_distributed_view(ctx):
    """What torch.distributed says once the rank asked for its default group:
    the group, a sum over it, and DistributedSampler's shard."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    assert not dist.is_initialized()  # never made unasked
    ddpspawn.torch.init_process_group(ctx)
    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total)
    mine = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "sum": total.item(),
        "shard": list(DistributedSampler(list(range(10)), shuffle=False)),
    }
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def _shared_memory_ranges():
    """The address ranges this process maps from /dev/shm."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/dev/shm/"):
                start, end = (int(v, 16) for v in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def gradients_in_shared_memory(ctx, find_unused):
    """After two steps (zero_grad to None between them): whether each
    parameter's gradient lies in shared memory (the reducer's buckets), and
    whether the ranks' gradients agree."""
    torch.manual_seed(0)
    model = ddpspawn.torch.DistributedDataParallel(
        make_model(), ctx, find_unused_parameters=find_unused
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = make_data(ctx.world_size)
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        mine = slice(ctx.rank * PER_RANK, (ctx.rank + 1) * PER_RANK)
        torch.nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
    ranges = _shared_memory_ranges()
    shared = [
        any(start <= p.grad.data_ptr() < end for start, end in ranges)
        for p in model.parameters()
    ]
    grads = [p.grad.clone() for p in model.parameters()]
    model.close()
    everyone = ctx.all_gather_object([g.tolist() for g in grads])
    return shared, all(other == everyone[0] for other in everyone)


def sharded_collectives_against_torch(ctx):
    """ddpspawn's reduce_scatter and all_gather (into one tensor) beside torch.distributed's
    reduce_scatter_tensor and all_gather_into_tensor on the same inputs, for every dtype and op:
    every rank's {case: (ddpspawn's output, torch's output, input unchanged)}."""
    import torch.distributed as dist

    ddpspawn.torch.init_process_group(ctx)
    rank, world = ctx.rank, ctx.world_size
    ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
           "product": dist.ReduceOp.PRODUCT}
    seen = {}
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        # Values whose sums and products are exact in every order (quarters for the floats), so
        # that the two libraries' orders of summation cannot differ; 5 elements a chunk.
        positions = torch.arange(5 * world)
        values = (positions % 7 - 3) * (rank + 1) + rank
        data = (values.to(torch.float64) / 4 if dtype.is_floating_point else values).to(dtype)
        for op in ("sum", "mean", "min", "max", "product"):
            original = data.clone()
            ours = torch.empty(5, dtype=dtype)
            ctx.reduce_scatter(ours, data, op)
            theirs = torch.empty(5, dtype=dtype)
            dist.reduce_scatter_tensor(theirs, data.clone(), op=ops.get(op, dist.ReduceOp.SUM))
            if op == "mean":  # Gloo has no AVG: the sum over the ranks, divided
                theirs = (theirs / world if dtype.is_floating_point
                          else torch.div(theirs, world, rounding_mode="trunc"))
            seen[f"reduce_scatter {dtype} {op}"] = (ours.tolist(), theirs.tolist(),
                                                    torch.equal(data, original))
        mine = torch.tensor([rank, -rank, 7 * rank + 1]).to(dtype)
        gathered = ctx.all_gather(mine)
        theirs = torch.empty(world * 3, dtype=dtype)
        dist.all_gather_into_tensor(theirs, mine)
        ours = torch.stack(gathered).flatten()
        seen[f"all_gather {dtype}"] = (ours.tolist(), theirs.tolist(), True)
    # Random floats: every rank's inputs (seeded by rank), summed in rank order in float32 as the
    # shared-memory path does, beside torch's (Gloo's order).
    inputs = [torch.randn(1000 * world, generator=torch.Generator().manual_seed(q))
              for q in range(world)]
    ours = ctx.reduce_scatter(torch.empty(1000), inputs[rank], "sum")
    theirs = torch.empty(1000)
    dist.reduce_scatter_tensor(theirs, inputs[rank].clone())
    in_rank_order = inputs[0].clone()
    for q in range(1, world):
        in_rank_order += inputs[q]
    seen["random float32 sum"] = (float((ours - theirs).abs().max()),
                                  torch.equal(ours, in_rank_order[rank * 1000:(rank + 1) * 1000]))
    # Wrong sizes: an error naming them, on this rank, before any collective.
    try:
        ctx.reduce_scatter(torch.empty(4), torch.empty(5 * world))
        seen["wrong sizes"] = None
    except ddpspawn.DdpspawnError as error:
        seen["wrong sizes"] = str(error)
    return ctx.all_gather_object(seen)
