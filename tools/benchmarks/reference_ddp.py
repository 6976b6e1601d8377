"""The reference of tools/bench: what users have today, torch.multiprocessing.spawn and
torch.nn.parallel.DistributedDataParallel on Debian's python3-torch (the same LibTorch, Gloo and
BLAS as ddpspawn). Trains the same workloads as ddpspawn_bench and prints the same JSON object.

Usage: /usr/bin/python3 reference_ddp.py --workload mlp|conv --mode ddp|nosync [--steps N]
       [--warmup N] [--nprocs N]

launch_to_first_batch runs from the mp.spawn call to rank 0's first finished step.
"""
import argparse
import contextlib
import json
import os
import resource
import socket
import sys
import time

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def make_model(workload):
    nn = torch.nn
    if workload == "conv":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def worker(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.nprocs)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(make_model(args.workload))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 1, 28, 28) if args.workload == "conv" else torch.randn(64, 784)
    y = torch.randint(0, 10, (64,))
    first_batch = steady_start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            steady_start = time.time()
        optimizer.zero_grad()
        sync = model.no_sync() if args.mode == "nosync" else contextlib.nullcontext()
        with sync:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        optimizer.step()
        if step == 0:
            first_batch = time.time()
    steps_per_s = args.steps / (time.time() - steady_start)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put({"launch_to_first_batch": first_batch - args.launch_time,
                   "steps_per_s": steps_per_s, "peak_rss_mb": rss.item()})
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--mode", default="ddp")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--nprocs", type=int, default=2)
    args = parser.parse_args()
    with socket.socket() as probe:  # the usual free-port probe
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    args.launch_time = time.time()  # the launch starts here (torch is already imported)
    mp.spawn(worker, args=(args, port, queue), nprocs=args.nprocs, join=True)
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    sys.exit(main())
