"""Your own torch nn.Module, data-parallel on 2 spawned ranks: each rank computes the gradients
of its half of the batch and averages them in place with ctx.all_reduce (torch tensors go through
DLPack, without a copy). It prints how far rank 0's weights are from one process trained on the
whole batch."""
import torch

import ddpspawn

STEPS = 20


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_data():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(32, 4, generator=generator)
    return x, x.sum(1, keepdim=True).sin()


def train(x, y, ctx=None):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if ctx is not None:  # the mean of equal shards' gradients is the whole batch's
            for parameter in model.parameters():
                ctx.all_reduce(parameter.grad, op="mean")
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def work(ctx):
    x, y = make_data()
    shard = slice(ctx.rank, None, ctx.world_size)  # rank r takes every world_size-th sample
    return [p.tolist() for p in train(x[shard], y[shard], ctx)]  # rank 0's comes back


if __name__ == "__main__":
    spawned = [torch.tensor(p) for p in ddpspawn.spawn(work, nprocs=2)]
    alone = train(*make_data())
    gap = max((a - b).abs().max().item() for a, b in zip(spawned, alone))
    print(f"2 ranks vs 1 process on the whole batch after {STEPS} SGD steps: "
          f"max weight difference {gap:.1e} ({'match' if gap < 1e-6 else 'MISMATCH'})")
