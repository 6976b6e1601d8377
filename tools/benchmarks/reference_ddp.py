"""The reference of tools/bench: what users have today, torch.multiprocessing.spawn and
torch.nn.parallel.DistributedDataParallel on the torch 2.11 that tools/setup installs (the same
LibTorch, Gloo and NCCL as ddpspawn). Trains the same workloads as ddpspawn_bench and prints the same JSON object.

Usage: python3 reference_ddp.py --workload mlp|conv --mode ddp|nosync [--steps N]
       [--warmup N] [--nprocs N] [--device cpu|cuda] [--optimizer sgd|adam|zero_adam|fsdp_adam|fsdp3_adam]

--optimizer adam or zero_adam (torch.distributed.optim.ZeroRedundancyOptimizer over Adam) adds
each rank's optimizer state bytes ("optimizer_state_bytes", by rank: every tensor in the state
of the optimizer that steps the rank's parameters, Adam's scalar `step` tensors included).

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

from bench_models import make_batch, make_model  # noqa: E402  the same models as the C++ side


def make_optimizer(name, model):
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01)
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-3)
    if name == "zero_adam":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                       lr=1e-3)
    if name in ("fsdp_adam", "fsdp3_adam"):  # over fully_shard's DTensor parameters (make_module)
        return torch.optim.Adam(model.parameters(), lr=1e-3)
    raise SystemExit(f"--optimizer {name}: sgd|adam|zero_adam|fsdp_adam|fsdp3_adam")


def fsdp_units(workload, model):
    """FSDP2's usual units, as ddpspawn_bench's full_shard takes them: each Linear of the mlp,
    each layer of the gpt (the root holds the rest)."""
    if workload == "gpt":
        return list(model.layers)
    if workload == "mlp":
        return [m for m in model if isinstance(m, torch.nn.Linear)]
    raise SystemExit(f"--optimizer fsdp3_adam: workload {workload} has no units (mlp and gpt have)")


def make_module(args, device, cuda, rank):
    """DDP around the workload's model; for fsdp_adam, FSDP2's fully_shard instead, with
    reshard_after_forward=False (FSDP's SHARD_GRAD_OP: ZeRO-2's traffic, parameters sharded
    between steps), the model as one unit; for fsdp3_adam, FULL_SHARD: fully_shard on each unit
    and then the root, resharding after forward."""
    model = make_model(args.workload).to(device)
    if args.optimizer == "fsdp_adam":
        from torch.distributed.fsdp import fully_shard
        return fully_shard(model, reshard_after_forward=False)
    if args.optimizer == "fsdp3_adam":
        from torch.distributed.fsdp import fully_shard
        for unit in fsdp_units(args.workload, model):
            fully_shard(unit)
        return fully_shard(model)
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)


def worker(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=args.nprocs)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    model = make_module(args, device, cuda, rank)
    optimizer = make_optimizer(args.optimizer, model)
    x, y = make_batch(args.workload)
    x, y = x.to(device), y.to(device)
    first_batch = steady_start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            steady_start = time.time()
        optimizer.zero_grad()
        sync = model.no_sync() if args.mode == "nosync" else contextlib.nullcontext()
        with sync:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        optimizer.step()
        if step == 0:
            first_batch = time.time()
    if cuda:
        torch.cuda.synchronize()
    # The job moves at its slowest rank's pace (under no_sync the ranks drift apart).
    steps_per_s = torch.tensor([args.steps / (time.time() - steady_start)]).to(device)
    dist.all_reduce(steps_per_s, op=dist.ReduceOp.MIN)
    steps_per_s = steps_per_s.item()
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0]).to(device)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    result = {"launch_to_first_batch": first_batch - args.launch_time,
              "steps_per_s": steps_per_s, "peak_rss_mb": rss.item()}
    if args.optimizer != "sgd":
        local = optimizer.optim if args.optimizer == "zero_adam" else optimizer
        # A DTensor's own shard (fsdp_adam's and fsdp3_adam's state).
        mine = sum((t.to_local() if hasattr(t, "to_local") else t).nbytes
                   for state in local.state.values() for t in state.values()
                   if torch.is_tensor(t))
        every = [None] * args.nprocs
        dist.all_gather_object(every, mine)
        result["optimizer_state_bytes"] = every
    if rank == 0:
        queue.put(result)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--mode", default="ddp")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl)")
    parser.add_argument("--optimizer", default="sgd",
                        help="sgd, adam, zero_adam, fsdp_adam or fsdp3_adam")
    args = parser.parse_args()
    with socket.socket() as probe:  # the usual free-port probe
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    args.launch_time = time.time()  # the launch starts here (torch is already imported)
    try:
        mp.spawn(worker, args=(args, port, queue), nprocs=args.nprocs, join=True)
    except mp.ProcessExitedException as e:
        # torch 2.11's Gloo group sometimes aborts a rank in destroy_process_group ("terminate
        # called without an active exception"), after rank 0 has put the measurement: it stands.
        if queue.empty():
            raise
        print(f"reference_ddp.py: a rank aborted after the measurement: {e}", file=sys.stderr)
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    sys.exit(main())
