"""tools/bench's Python side of ddpspawn: ddpspawn.spawn and ddpspawn.torch.DistributedDataParallel
(a torch nn.Module with its gradients reduced by libddpspawn while backward runs), on the same
workloads and loop as reference_ddp.py (mp.spawn + PyTorch's DDP), printing the same JSON object.

Usage: python3 python_ddp.py --workload mlp|conv [--steps N] [--warmup N] [--nprocs N]
       [--start-method spawn|fork|forkserver] [--prestart 1]

--prestart 1 (forkserver): a first launch starts the server before the measured one, as a later
launch of the same process finds it.

launch_to_first_batch runs from the ddpspawn.spawn call to rank 0's first finished step.
"""
import argparse
import contextlib
import json
import os
import resource
import sys
import time

import torch

import ddpspawn
import ddpspawn.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import make_batch, make_model  # noqa: E402  (the same models)


def worker(ctx, args):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ddpspawn.torch.DistributedDataParallel(make_model(args.workload), ctx)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = make_batch(args.workload)
    first_batch = steady_start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            steady_start = time.time()
        optimizer.zero_grad()
        with model.no_sync() if args.mode == "nosync" else contextlib.nullcontext():
            torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step == 0:
            first_batch = time.time()
    # The job moves at its slowest rank's pace (under no_sync the ranks drift apart).
    steps_per_s = min(ctx.all_gather_object(args.steps / (time.time() - steady_start)))
    model.close()
    rss = max(ctx.all_gather_object(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
    return {"launch_to_first_batch": first_batch - args.launch_time,
            "steps_per_s": steps_per_s, "peak_rss_mb": rss}


def started(ctx):
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--mode", default="ddp", choices=["ddp", "nosync"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--start-method", default="spawn")
    parser.add_argument("--prestart", type=int, default=0)
    args = parser.parse_args()
    if args.prestart:
        ddpspawn.spawn(started, nprocs=args.nprocs, start_method=args.start_method)
    args.launch_time = time.time()  # the launch starts here (torch is already imported)
    result = ddpspawn.spawn(worker, args=(args,), nprocs=args.nprocs,
                            start_method=args.start_method)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
