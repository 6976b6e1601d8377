"""The reference for ddpspawn's post-local SGD: torch 2.11's own DDP with
post_localSGD_hook and PeriodicModelAverager (torch.distributed.algorithms),
on Gloo processes of this machine, training the built-in MLP's layers
(Linear, ReLU, Linear) from given initial weights on a CSV of four features
and a class, rank r taking positions r, r + world, ... of the file's order in
batches, as ddpspawn's unshuffled sampler does (with `accumulate`
micro-batches a step, all but the last under no_sync, as fit's
accumulate_grad_batches). Returns every rank's final weights."""

import contextlib
import os
import tempfile
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as hooks
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager


def _rank_main(rank: int, world: int, store: str, data: str, initial: str, steps: int,
               batch_size: int, lr: float, momentum: float, local: Optional[Dict],
               accumulate: int) -> None:
    rows = np.loadtxt(data, delimiter=",")
    x = torch.tensor(rows[:, :4], dtype=torch.float32)
    y = torch.tensor(rows[:, 4], dtype=torch.long)
    dist.init_process_group("gloo", init_method="file://" + store + ".store", rank=rank,
                            world_size=world)
    start = load_file(initial)
    hidden = start["0.weight"].shape[0]
    model = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, start["2.weight"].shape[0]))
    model.load_state_dict(start, strict=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    averager = None
    if local is not None:
        subgroup = None
        if local.get("node_size"):  # the gradients' mean within each node after the start
            subgroup, _ = dist.new_subgroups(group_size=local["node_size"])
        state = hooks.PostLocalSGDState(process_group=None, subgroup=subgroup,
                                        start_localSGD_iter=local["start"],
                                        post_local_gradient_allreduce=subgroup is not None)
        ddp.register_comm_hook(state, hooks.post_localSGD_hook)
        averager = PeriodicModelAverager(period=local["period"], warmup_steps=local["start"])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    span = world * batch_size
    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(accumulate):
            k = accumulate * step + micro
            index = torch.arange(rank + span * k, rank + span * (k + 1), world)
            # no_sync must hold the forward too: DDP reads it there.
            with ddp.no_sync() if micro + 1 < accumulate else contextlib.nullcontext():
                loss = torch.nn.functional.cross_entropy(ddp(x[index]), y[index]) / accumulate
                loss.backward()
        optimizer.step()
        if averager is not None:
            averager.average_parameters([p for p in model.parameters() if p.grad is not None])
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              f"{store}.{rank}.safetensors")
    dist.destroy_process_group()


def train(data: str, initial: str, world: int, steps: int, batch_size: int, lr: float,
          momentum: float, local: Optional[Dict] = None,
          accumulate: int = 1) -> List[Dict[str, torch.Tensor]]:
    """`local`: None for plain DDP; else {"start": N, "period": P, "node_size": S or None}
    (S: the gradients' mean within groups of S consecutive ranks after the start; None:
    each rank's own)."""
    with tempfile.TemporaryDirectory() as directory:
        store = os.path.join(directory, "run")
        mp.start_processes(_rank_main, nprocs=world, start_method="fork",
                           args=(world, store, data, initial, steps, batch_size, lr, momentum,
                                 local, accumulate))
        return [load_file(f"{store}.{rank}.safetensors") for rank in range(world)]


def gap(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two sets of the same weights."""
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max((a[k] - b[k]).abs().max().item() for k in b)
