"""A world of 1 on the NCCL backend: every collective of the C ABI, through the Python binding,
then CUDA torch tensors through DLPack (in place, on the device) and
ddpspawn.torch.DistributedDataParallel on a CUDA module (its gradients equal one process's).

Run by gpu_check.py with PYTHONPATH and DDPSPAWN_LIBRARY set; prints one summary line.
"""
import sys

import numpy as np

import ddpspawn


def work(ctx, backend):
    out = {}
    ctx.barrier("start")
    def listed(x):
        return np.asarray(x).tolist()

    out["all_reduce"] = listed(ctx.all_reduce(np.arange(5, dtype=np.float32), op="sum"))
    out["all_reduce_max"] = listed(ctx.all_reduce(np.array([3, 7], dtype=np.int64), op="max"))
    out["reduce"] = listed(ctx.reduce(np.ones(3, dtype=np.float64), op="sum", dst=0))
    out["broadcast"] = listed(ctx.broadcast(np.full(4, 2.5, dtype=np.float32), src=0))
    out["all_gather"] = [listed(a) for a in ctx.all_gather(np.array([1.0, 2.0]))]
    out["broadcast_object"] = ctx.broadcast_object({"k": [1, 2]}, src=0)
    out["all_gather_object"] = ctx.all_gather_object("rank0")
    grads = [np.full(1000, 4.0, dtype=np.float32), np.full(10, 2.0, dtype=np.float32)]
    with ctx.reducer(grads) as reducer:
        for i in range(len(grads)):
            reducer.mark_ready(i)
        reducer.finalize()
    out["reducer_mean"] = [float(g[0]) for g in grads]
    if backend == "nccl":
        out.update(cuda_tensors(ctx))
    return out


def cuda_tensors(ctx):
    """CUDA tensors go to NCCL through DLPack, in place; the DDP wrapper on a CUDA module."""
    import torch

    import ddpspawn.torch

    tensor = torch.arange(5, dtype=torch.float32, device="cuda")
    address = tensor.data_ptr()
    ctx.all_reduce(tensor, op="sum")
    ctx.broadcast(tensor, 0)
    same_place = tensor.data_ptr() == address and tensor.is_cuda
    # reduce_scatter on the device (a world of 1: the whole input is rank 0's chunk).
    scattered = ctx.reduce_scatter(torch.empty(5, device="cuda"), tensor * 2, "sum")
    torch.manual_seed(0)
    alone = torch.nn.Linear(4, 2).cuda()
    wrapped = ddpspawn.torch.DistributedDataParallel(torch.nn.Linear(4, 2).cuda(), ctx)
    wrapped.module.load_state_dict(alone.state_dict())
    x = torch.randn(3, 4, device="cuda")
    alone(x).square().sum().backward()
    wrapped(x).square().sum().backward()
    gap = (wrapped.module.weight.grad - alone.weight.grad).abs().max().item()
    # The end-of-backward finalize ran (a world of 1 would show no gap without it).
    assert all(wrapped.reducer.written(i) for i in range(2)), "finalize did not run"
    wrapped.close()
    return {"cuda_in_place": same_place, "cuda_values": tensor.tolist(), "cuda_ddp_gap": gap,
            "cuda_reduce_scatter": scattered.tolist()}


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "nccl"  # gloo: try this script without a GPU
    result = ddpspawn.spawn(work, args=(backend,), nprocs=1, backend=backend)
    expected = {
        "all_reduce": [0.0, 1.0, 2.0, 3.0, 4.0], "all_reduce_max": [3, 7], "reduce": [1.0] * 3,
        "broadcast": [2.5] * 4, "all_gather": [[1.0, 2.0]], "broadcast_object": {"k": [1, 2]},
        "all_gather_object": ["rank0"], "reducer_mean": [4.0, 2.0],
    }
    if backend == "nccl":
        expected.update({"cuda_in_place": True, "cuda_values": [0.0, 1.0, 2.0, 3.0, 4.0],
                         "cuda_ddp_gap": 0.0, "cuda_reduce_scatter": [0.0, 2.0, 4.0, 6.0, 8.0]})
    assert result == expected, f"got {result}, expected {expected}"
    print(f"{backend} world of 1: barrier, all_reduce (sum, max), reduce, broadcast, all_gather, "
          "broadcast_object, all_gather_object, reducer"
          f"{', CUDA tensors through DLPack, reduce_scatter and DDP on CUDA' if backend == 'nccl' else ''}"
          ": all as expected")
