"""Your own torch nn.Module, data-parallel on 2 spawned ranks with
ddpspawn.torch.DistributedDataParallel: each rank computes the gradients of its half of the batch,
and backward() leaves them averaged over the ranks (buckets are reduced by libddpspawn while
backward runs). It prints how far rank 0's weights are from one process trained on the whole
batch."""
import torch

import ddpspawn
import ddpspawn.torch

STEPS = 20


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_data():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(32, 4, generator=generator)
    return x, x.sum(1, keepdim=True).sin()


def train(model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # averaged over the ranks
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def work(ctx):
    x, y = make_data()
    shard = slice(ctx.rank, None, ctx.world_size)  # rank r takes every world_size-th sample
    model = ddpspawn.torch.DistributedDataParallel(make_model(), ctx)
    return [p.tolist() for p in train(model, x[shard], y[shard])]  # rank 0's comes back


if __name__ == "__main__":
    spawned = [torch.tensor(p) for p in ddpspawn.spawn(work, nprocs=2)]
    alone = train(make_model(), *make_data())
    gap = max((a - b).abs().max().item() for a, b in zip(spawned, alone))
    print(f"2 ranks vs 1 process on the whole batch after {STEPS} SGD steps: "
          f"max weight difference {gap:.1e} ({'match' if gap < 1e-6 else 'MISMATCH'})")
