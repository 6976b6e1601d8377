"""Worker functions for test_python_comm_hook.py: communication hooks written
in Python and the ranks that run them (module level, so that spawn-mode
workers import them by name). Rank 0 returns what every rank saw."""

import numpy


def mean_hook(ctx, bucket):
    """The plain mean, through the lent context's all-reduce: what the
    built-in "allreduce" hook computes."""
    ctx.all_reduce(bucket.data, "mean")


class CountingMean:
    """mean_hook, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, ctx, bucket):
        self.calls += 1
        mean_hook(ctx, bucket)


def max_hook(ctx, bucket):
    """Not an average: the largest value over the ranks, so that a test can
    tell this hook's collective ran instead of the built-in mean."""
    ctx.all_reduce(bucket.data, "max")


class TopK:
    """Top-k sparsification with error feedback: each rank sends the k
    largest entries (by magnitude) of its bucket plus what it left out
    before, as int32 indices and float32 values; every rank adds up the
    ranks' sparse gradients into the bucket and divides by the world size.
    Counts the elements sent and the bucket elements seen."""

    def __init__(self, k):
        self.k = k
        self.residual = {}
        self.sent = 0
        self.dense = 0

    def __call__(self, ctx, bucket):
        gradient = numpy.frombuffer(bucket.data, dtype=bucket.dtype)
        residual = self.residual.setdefault(bucket.index, numpy.zeros_like(gradient))
        residual += gradient
        k = min(self.k, gradient.size)
        chosen = numpy.argpartition(numpy.abs(residual), -k)[-k:].astype(numpy.int32)
        values = residual[chosen].astype(numpy.float32)
        residual[chosen] = 0  # sent; the rest waits for the next step
        gradient[:] = 0
        for indices, sent in zip(ctx.all_gather(chosen), ctx.all_gather(values)):
            numpy.add.at(gradient, indices, sent)
        gradient /= ctx.world_size
        self.sent += k
        self.dense += gradient.size


def _regression(rank, world_size):
    """Every rank's share of a 16-64-1 regression problem."""
    import torch

    teacher = torch.Generator().manual_seed(99)
    w1, w2 = torch.randn(16, 8, generator=teacher), torch.randn(8, 1, generator=teacher)

    def data(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(64, 16, generator=g)
        return x, torch.tanh(x @ w1) @ w2

    every = [data(r) for r in range(world_size)]
    return every[rank], (torch.cat([x for x, _ in every]), torch.cat([y for _, y in every]))


def wrapper_trains(ctx, hook, steps=60, lr=0.1):
    """Trains the regression MLP with ddpspawn.torch.DistributedDataParallel
    and `hook` (a name, "mean" for CountingMean, or "topk" for TopK(64));
    returns every rank's (loss before, loss after, flat weights, figures):
    the figures are (calls, buckets per step) for "mean", (elements sent,
    bucket elements) for "topk", else None."""
    import torch

    import ddpspawn.torch

    torch.set_num_threads(1)
    (x, y), (x_all, y_all) = _regression(ctx.rank, ctx.world_size)
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    chosen = {"mean": CountingMean(), "topk": TopK(64)}.get(hook, hook)
    model = ddpspawn.torch.DistributedDataParallel(net, ctx, comm_hook=chosen)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def loss_on_everything():
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(net(x_all), y_all))

    before = loss_on_everything()
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    figures = None
    if isinstance(chosen, TopK):
        figures = (chosen.sent, chosen.dense)
    elif isinstance(chosen, CountingMean):
        figures = (chosen.calls, model.reducer.bucket_count)
    model.close()
    weights = torch.cat([p.detach().flatten() for p in net.parameters()]).tolist()
    return ctx.all_gather_object((before, loss_on_everything(), weights, figures))


def max_of_ranks(ctx):
    """A reducer over numpy buffers with max_hook: every rank's values
    differ, so the result is the largest rank's, not the mean."""
    buffers = [numpy.full(7, ctx.rank + 1.0, numpy.float32),
               numpy.full(3, -ctx.rank, numpy.float64)]
    with ctx.reducer(buffers, comm_hook=max_hook) as reducer:
        for k in range(len(buffers)):
            reducer.mark_ready(k)
        reducer.finalize()
    return ctx.all_gather_object([b.tolist() for b in buffers])


def c_hook_trains(ctx, hook):
    """wrapper_trains with `hook`, a ddpspawn.CCommHook over mean_hook.c; also every rank's count
    of the buckets the C hook averaged in its process."""
    import ctypes

    trained = wrapper_trains(ctx, hook)
    counter = ctypes.CDLL(hook.library).mean_hook_buckets_averaged
    counter.restype = ctypes.c_longlong
    return trained, ctx.all_gather_object(counter())
