"""Worker functions for the reducer tests, at module level so that spawn-mode
workers can import them by name. Each takes the Context first, as
ddpspawn.spawn passes it, and rank 0 returns what every rank saw (gathered
with all_gather_object) for the test to check."""

import array
import random

import numpy

# Buffer sizes (elements) and numpy dtypes of the mixed set every rank uses;
# the two big ones exceed a tiny bucket cap on their own.
MIXED = [
    (5, "float32"),
    (3000, "float32"),
    (4, "float64"),
    (1, "float32"),
    (2000, "float64"),
    (6, "int32"),
    (7, "float32"),
]


def fill_value(rank, index, iteration):
    """What rank `rank` writes into buffer `index` in `iteration`."""
    return (rank + 1) * (index + 1) + 0.5 * iteration


def mean_value(world_size, index, iteration):
    return (world_size + 1) / 2 * (index + 1) + 0.5 * iteration


def int_fill(rank, index):
    """Integer buffers hold 2 * (rank + 1) * (index + 1): the mean over the
    ranks, (world_size + 1) * (index + 1), is exact."""
    return 2 * (rank + 1) * (index + 1)


def _mark_order(order, count, rank, iteration):
    indices = list(range(count))
    if order == "reverse":
        return indices[::-1]
    if order == "random":
        # A different order on every rank and in every iteration.
        random.Random(1000 * rank + iteration).shuffle(indices)
    return indices


def reducer_means(ctx, orders, caps, iterations=3):
    """For each mark order and each (bucket_cap_mb, first_bucket_cap_mb):
    runs `iterations` iterations over MIXED and records the largest error
    against the exact mean, and the bucket count."""
    rank, world = ctx.rank, ctx.world_size
    results = {}
    for order in orders:
        for cap, first_cap in caps:
            buffers = [numpy.zeros(n, dtype=dtype) for n, dtype in MIXED]
            worst = 0.0
            with ctx.reducer(
                buffers, bucket_cap_mb=cap, first_bucket_cap_mb=first_cap
            ) as reducer:
                buckets = reducer.bucket_count
                for iteration in range(iterations):
                    for k, buffer in enumerate(buffers):
                        if buffer.dtype.kind == "i":
                            buffer[:] = int_fill(rank, k)
                        else:
                            buffer[:] = fill_value(rank, k, iteration)
                    for k in _mark_order(order, len(buffers), rank, iteration):
                        reducer.mark_ready(k)
                    reducer.finalize()
                    for k, buffer in enumerate(buffers):
                        if buffer.dtype.kind == "i":
                            want = (world + 1) * (k + 1)
                        else:
                            want = mean_value(world, k, iteration)
                        worst = max(worst, float(numpy.max(numpy.abs(buffer - want))))
            results[(order, cap, first_cap)] = (worst, buckets)
    return ctx.all_gather_object(results)


def reducer_unused(ctx, find_unused):
    """Buffer 0 is marked by every rank, buffer 1 by none, buffer 2 by rank 1
    only; then one iteration marks everything. Returns each rank's buffers
    after both iterations, and which buffers each finalize wrote."""
    rank = ctx.rank
    used = numpy.full(3, rank + 1.0, dtype=numpy.float32)
    unused = numpy.full(4, 100.0 + rank, dtype=numpy.float64)
    partly = numpy.full(2, 10.0 * (rank + 1), dtype=numpy.float32)
    buffers = [used, unused, partly]
    with ctx.reducer(buffers, find_unused_parameters=find_unused) as reducer:
        reducer.mark_ready(0)
        if rank == 1:
            reducer.mark_ready(2)
        reducer.finalize()
        first = [b.tolist() for b in buffers]
        first_written = [reducer.written(k) for k in range(len(buffers))]
        # Next iteration: everything used, every buffer gets the mean.
        for b in buffers:
            b[:] = rank + 1
        for k in range(len(buffers)):
            reducer.mark_ready(k)
        reducer.finalize()
        second = [b.tolist() for b in buffers]
        second_written = [reducer.written(k) for k in range(len(buffers))]
    return ctx.all_gather_object((first, second, first_written, second_written))


def reducer_no_sync(ctx):
    """Two iterations of local accumulation under no_sync, then a synced one.
    Returns, per rank: the buffer after the no_sync iterations, the sync flag
    inside and after, the buffer after the synced iteration, and the sync flag
    inside ``no_sync(False)`` (a conditional no_sync whose flag is off) and
    ``no_sync(True)``."""
    rank = ctx.rank
    grad = numpy.zeros(5, dtype=numpy.float32)
    other = numpy.zeros(3, dtype=numpy.float64)
    with ctx.reducer([grad, other]) as reducer:
        with reducer.no_sync():
            inside = reducer.sync
            for _ in range(2):
                grad += rank + 1
                other += 2 * (rank + 1)
                reducer.mark_ready(1)
                reducer.mark_ready(0)
                reducer.finalize()  # does nothing under no_sync
            inside = (inside, reducer.written(0))
        local = (grad.tolist(), other.tolist())
        after = reducer.sync
        grad += rank + 1
        other += 2 * (rank + 1)
        reducer.mark_ready(0)
        reducer.mark_ready(1)
        reducer.finalize()
        synced = (grad.tolist(), other.tolist())
        # And a plain iteration afterwards.
        grad[:] = rank
        other[:] = -rank
        reducer.mark_ready(0)
        reducer.mark_ready(1)
        reducer.finalize()
        plain = (grad.tolist(), other.tolist())
        with reducer.no_sync(False):
            conditional = [reducer.sync]
        with reducer.no_sync(True):
            conditional.append(reducer.sync)
    return ctx.all_gather_object((local, inside, after, synced, plain, conditional))


def hook_values(rank, n, dtype):
    """Values away from zero that fp16/bf16 cannot all hold exactly."""
    return ((rank + 1) * 0.1 + numpy.arange(n) * 0.0137 + 0.3).astype(dtype)


def reducer_hook(ctx, hook, iterations=2):
    """Averages float32 and float64 buffers through `hook`; returns each
    rank's largest relative error against the exact mean, each buffer's error
    norm relative to the mean's after the first iteration, and the reducer's
    compression figures. For powersgd the buffers go as torch tensors over the
    same memory, the float32 ones as 20x15 and 8x8 matrices: PowerSGD
    compresses only matrices, and numpy buffers reach the reducer flat."""
    rank, world = ctx.rank, ctx.world_size
    sizes = [(300, "float32"), (17, "float64"), (64, "float32")]
    buffers = [numpy.zeros(n, dtype=dtype) for n, dtype in sizes]
    gradients = buffers
    if hook == "powersgd":
        import torch

        shapes = {300: (20, 15), 17: (17,), 64: (8, 8)}
        gradients = [torch.from_numpy(b).view(shapes[b.size]) for b in buffers]
    worst, first = 0.0, []
    with ctx.reducer(gradients, comm_hook=hook, powersgd_start_iteration=0) as reducer:
        for iteration in range(iterations):
            for buffer in buffers:
                buffer[:] = hook_values(rank, buffer.size, buffer.dtype) + iteration
            for k in reversed(range(len(buffers))):
                reducer.mark_ready(k)
            reducer.finalize()
            for buffer in buffers:
                exact = sum(
                    hook_values(r, buffer.size, numpy.float64) for r in range(world)
                ) / world + iteration
                error = numpy.max(numpy.abs(buffer - exact) / numpy.abs(exact))
                worst = max(worst, float(error))
                if iteration == 0:
                    first.append(
                        float(numpy.linalg.norm(buffer - exact) / numpy.linalg.norm(exact))
                    )
        compression = reducer.compression
    return ctx.all_gather_object((worst, first, compression))


def reducer_buffer_kinds(ctx):
    """array.array, memoryview and numpy buffers of every element type in one
    reducer; returns each rank's buffers after one iteration."""
    rank = ctx.rank
    a_double = array.array("d", [rank + 1.0] * 3)
    a_int = array.array("i", [2 * (rank + 1)] * 2)
    m_float = memoryview(bytearray(array.array("f", [rank + 1.0] * 4).tobytes())).cast("f")
    m_int64 = memoryview(bytearray(array.array("q", [4 * (rank + 1)] * 2).tobytes())).cast("q")
    n_matrix = numpy.full((2, 3), rank + 1.0, dtype=numpy.float32)
    buffers = [a_double, a_int, m_float, m_int64, n_matrix]
    with ctx.reducer(buffers) as reducer:
        for k in range(len(buffers)):
            reducer.mark_ready(k)
        reducer.finalize()
    return ctx.all_gather_object([b.tolist() for b in buffers])


# -- training equivalence with torch ---------------------------------------

FEATURES = 3
PER_RANK = 8


def _regression_data(world_size):
    """The full batch, world_size * PER_RANK rows, the same on every rank."""
    import torch

    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(world_size * PER_RANK, FEATURES, generator=generator)
    w = torch.tensor([[1.5, -2.0, 0.5]])
    y = x @ w.t() + 0.3 + 0.01 * torch.randn(world_size * PER_RANK, 1, generator=generator)
    return x, y


def _linear_model():
    import torch

    torch.manual_seed(7)  # the same initial parameters everywhere
    return torch.nn.Linear(FEATURES, 1)


def _train(model, x, y, steps, lr, after_backward=None):
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        for p in model.parameters():
            p.grad.zero_()  # in place: the reducer holds these buffers
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if after_backward is not None:
            after_backward()
        optimizer.step()


def torch_linear_regression(ctx, steps=5, lr=0.1, tensors=False):
    """Trains a linear regression on this rank's shard of the batch with the
    gradients averaged by a Reducer over p.grad.numpy() (or, with tensors,
    over the p.grad tensors themselves, through DLPack); rank 0 also trains a
    single-process model on the whole batch and returns the largest
    parameter difference and whether every rank ended with the same
    parameters."""
    import torch

    torch.set_num_threads(1)
    rank, world = ctx.rank, ctx.world_size
    x, y = _regression_data(world)
    shard = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    model = _linear_model()
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    grad_storage = [p.grad.data_ptr() for p in params]
    reducer = ctx.reducer([p.grad if tensors else p.grad.numpy() for p in params])

    def sync_gradients():
        # The autograd engine accumulated into the very tensors (no new grads).
        assert [p.grad.data_ptr() for p in params] == grad_storage
        for k in reversed(range(len(params))):  # backward's order
            reducer.mark_ready(k)
        reducer.finalize()

    _train(model, x[shard], y[shard], steps, lr, sync_gradients)
    reducer.close()
    mine = torch.cat([p.detach().flatten() for p in params]).tolist()
    everyone = ctx.all_gather_object(mine)
    if rank != 0:
        return None
    reference = _linear_model()
    for p in reference.parameters():
        p.grad = torch.zeros_like(p)
    _train(reference, x, y, steps, lr)
    expected = torch.cat([p.detach().flatten() for p in reference.parameters()])
    initial = torch.cat([p.detach().flatten() for p in _linear_model().parameters()])
    difference = float((torch.tensor(mine) - expected).abs().max())
    moved = float((expected - initial).abs().max())
    return {
        "max_difference": difference,
        "moved": moved,
        "ranks_agree": all(p == everyone[0] for p in everyone),
    }


def reducer_torch_powersgd(ctx, shaped):
    """PowerSGD (rank 1, from iteration 1) over a 32x16 weight and a bias of
    16, as torch tensors (shaped) or as flat numpy views of them. Per
    iteration: the reducer's compression figures, the weight's distance from
    the exact mean relative to the mean's norm, and the bias's largest error."""
    import torch

    generator = torch.Generator().manual_seed(100 + ctx.rank)
    weight = torch.zeros(32, 16)
    bias = torch.zeros(16)
    gradients = [weight, bias] if shaped else [weight.view(-1).numpy(), bias.numpy()]
    seen = []
    with ctx.reducer(gradients, comm_hook="powersgd", powersgd_start_iteration=1) as reducer:
        for _ in range(3):
            weight.copy_(torch.randn(32, 16, generator=generator))
            bias.copy_(torch.randn(16, generator=generator))
            exact_weight = ctx.all_reduce(weight.clone(), "mean")
            exact_bias = ctx.all_reduce(bias.clone(), "mean")
            reducer.mark_ready(1)
            reducer.mark_ready(0)
            reducer.finalize()
            seen.append(
                (
                    reducer.compression,
                    ((weight - exact_weight).norm() / exact_weight.norm()).item(),
                    (bias - exact_bias).abs().max().item(),
                )
            )
    return ctx.all_gather_object(seen)


def reducer_trains_flat(ctx, hook, steps=150, lr=0.1):
    """Trains a 16-64-1 regression MLP on this rank's own data with the
    gradients handed to the reducer as flat numpy views of p.grad (as a
    binding without shapes hands them), averaged through `hook` (PowerSGD
    rank 2 from iteration 5 for the PowerSGD hooks). Returns the loss on every
    rank's data together before and after, and the last step's compression
    figures (elements sent, dense elements), for every rank."""
    import torch

    torch.set_num_threads(1)
    teacher = torch.Generator().manual_seed(99)
    w1, w2 = torch.randn(16, 8, generator=teacher), torch.randn(8, 1, generator=teacher)

    def data(seed, n):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 16, generator=g)
        return x, torch.tanh(x @ w1) @ w2

    x, y = data(ctx.rank, 64)
    every = [data(r, 64) for r in range(ctx.world_size)]  # the objective all ranks train
    x_eval, y_eval = torch.cat([x for x, _ in every]), torch.cat([y for _, y in every])
    torch.manual_seed(3)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)

    def eval_loss():
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(model(x_eval), y_eval))

    before = eval_loss()
    options = {}
    if "powersgd" in hook:
        options = dict(powersgd_rank=2, powersgd_start_iteration=5)
    with ctx.reducer([p.grad.view(-1).numpy() for p in params], comm_hook=hook,
                     **options) as reducer:
        for _ in range(steps):
            for p in params:
                p.grad.zero_()
            torch.nn.functional.mse_loss(model(x), y).backward()
            for k in reversed(range(len(params))):
                reducer.mark_ready(k)
            reducer.finalize()
            with torch.no_grad():
                for p in params:
                    p -= lr * p.grad
        compression = reducer.compression
    return ctx.all_gather_object((before, eval_loss(), compression))
