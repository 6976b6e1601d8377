"""What the Trainer's and Fabric's strategies share: their arguments' checks (DDP options, comm
hooks, start methods), the collectives through ddpspawn's group, joining a group that a cluster's
launcher (torchrun, SLURM) started, and Lightning objects as bytes."""

from __future__ import annotations

import atexit
import io
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Union

import torch
import torch.distributed as dist

import ddpspawn
import ddpspawn.torch as ddpspawn_torch

from .._errors import InvalidArgumentError

# torch DDP's options that the ddpspawn wrapper honours, under the same names.
DDP_OPTIONS = ("find_unused_parameters", "gradient_as_bucket_view", "bucket_cap_mb",
               "broadcast_buffers")
START_METHODS = ("spawn", "fork", "forkserver")


def check_options(what: str, start_method: str, model_averaging_period: Optional[int],
                  kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The DDP options of `kwargs` that ddpspawn's wrapper takes; anything else refused."""
    if start_method not in START_METHODS:
        raise InvalidArgumentError(
            f"{what}: start_method {start_method!r} is not one of {', '.join(START_METHODS)} "
            "(ddpspawn's launcher starts the ranks; 'popen', Lightning's script launcher, is not "
            "supported: under torchrun or SLURM the ranks join the cluster's job instead)"
        )
    if model_averaging_period is not None:
        raise InvalidArgumentError(
            f"{what}: model_averaging_period (post-local SGD) is not supported yet")
    if kwargs.get("static_graph"):
        raise InvalidArgumentError(
            f"{what}: static_graph=True is not supported yet (ddpspawn's Python DDP wrapper has "
            "no static graph)")
    kwargs = {k: v for k, v in kwargs.items() if k != "static_graph"}
    unknown = sorted(set(kwargs) - set(DDP_OPTIONS))
    if unknown:
        raise InvalidArgumentError(
            f"{what}: DDP option(s) {', '.join(unknown)} not supported; it takes "
            f"{', '.join(DDP_OPTIONS)}")
    return kwargs


_POWERSGD = ("powersgd", "batched_powersgd")


def comm_hook_options(what: str, hook: Optional[Callable[..., Any]], state: Optional[object],
                      wrapper: Optional[Callable[..., Any]]) -> Dict[str, Any]:
    """The wrapper's comm_hook options for torch DDP's `hook` with `state` and `wrapper`: torch's
    built-in hooks by ddpspawn's name for them, anything else (a hook of one's own, a wrapped
    hook) as a hook written in Python (:class:`TorchStyleHook`)."""
    if hook is None and wrapper is None:
        return {}
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook is None:
        hook = default_hooks.allreduce_hook
    by_hook = {default_hooks.allreduce_hook: "allreduce",
               default_hooks.fp16_compress_hook: "fp16",
               default_hooks.bf16_compress_hook: "bf16",
               powerSGD_hook.powerSGD_hook: "powersgd",
               powerSGD_hook.batched_powerSGD_hook: "batched_powersgd"}
    name = by_hook.get(hook)
    if wrapper is not None:
        if name in _POWERSGD:
            raise InvalidArgumentError(
                f"{what}: ddp_comm_wrapper around {hook.__qualname__} is not supported "
                "(torch's PowerSGD asks its buckets for their parameters, which ddpspawn's do not "
                "list); give the hook alone, which runs as ddpspawn's own PowerSGD")
        return {"comm_hook": TorchStyleHook(hook, state, wrapper)}
    if name is None:
        return {"comm_hook": TorchStyleHook(hook, state)}
    if name not in _POWERSGD:
        return {"comm_hook": name}
    if not isinstance(state, powerSGD_hook.PowerSGDState):
        raise InvalidArgumentError(
            f"{what}: ddp_comm_hook {hook.__qualname__} needs ddp_comm_state, a "
            "PowerSGDState"
        )
    if not state.use_error_feedback or not state.warm_start:
        raise InvalidArgumentError(
            f"{what}: ddpspawn's PowerSGD always uses error feedback and warm start; "
            "a PowerSGDState with use_error_feedback or warm_start False is not supported"
        )
    return {"comm_hook": name, "powersgd_rank": state.matrix_approximation_rank,
            "powersgd_start_iteration": state.start_powerSGD_iter}


class TorchStyleHook:
    """torch DDP's comm hook, ``hook(state, bucket) -> Future[Tensor]`` (``wrapper(hook)`` when a
    wrapper is given), as a ddpspawn hook written in Python: it gets each of the reducer's buckets
    as a torch ``GradBucket`` look-alike (a tensor over the bucket's memory, no copy), and its
    future's tensor becomes the bucket's mean. Picklable when the hook, its state and the wrapper
    are (a spawned rank unpickles it, and wraps the hook there: torch's wrappers return closures)."""

    def __init__(self, hook: Callable[..., Any], state: Optional[object],
                 wrapper: Optional[Callable[..., Any]] = None) -> None:
        self.hook, self.state, self.wrapper = hook, state, wrapper
        self._run: Optional[Callable[..., Any]] = None

    def __getstate__(self) -> Dict[str, Any]:
        return {"hook": self.hook, "state": self.state, "wrapper": self.wrapper, "_run": None}

    def __call__(self, context: Any, bucket: Any) -> None:
        if self._run is None:
            self._run = self.wrapper(self.hook) if self.wrapper is not None else self.hook
        data = torch.frombuffer(bucket.data, dtype=getattr(torch, bucket.dtype))
        grad_bucket = _GradBucket(bucket.index, bucket.bucket_count, data)
        result = self._run(self.state, grad_bucket).wait()
        if isinstance(result, list):  # a future of all_reduce's own holds [tensor]
            result = result[0]
        if result.data_ptr() != data.data_ptr() or result.dtype != data.dtype:
            data.copy_(result)


class _GradBucket:
    """What a torch comm hook calls on its ``dist.GradBucket``, over one ddpspawn bucket."""

    def __init__(self, index: int, bucket_count: int, buffer: torch.Tensor) -> None:
        self._index, self._count, self._buffer = index, bucket_count, buffer

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._index == self._count - 1

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer

    def gradients(self) -> List[torch.Tensor]:
        raise InvalidArgumentError(_NO_PARAMETERS)

    def parameters(self) -> List[torch.Tensor]:
        raise InvalidArgumentError(_NO_PARAMETERS)


_NO_PARAMETERS = (
    "this comm hook asks its bucket for gradients() or parameters(), which ddpspawn's buckets do "
    "not list (they hold the gradients back to back: use buffer()); torch's PowerSGD hooks are "
    "run as ddpspawn's own when given without ddp_comm_wrapper")


def backend_for(device: torch.device, backend: Optional[str], what: str) -> str:
    chosen = backend or ("nccl" if device.type == "cuda" else "gloo")
    if chosen not in ("gloo", "nccl"):
        raise InvalidArgumentError(f"{what}: process_group_backend {chosen!r} is not gloo or nccl")
    return str(chosen)


def join_cluster_job(cluster_environment: Any, backend: str, timeout: Optional[float],
                     init_dist_connection: Callable[..., None], what: str) -> ddpspawn.Context:
    """This process's membership of ddpspawn's group and torch.distributed's default group, when
    a cluster's launcher (torchrun, SLURM) started the ranks: both from the environment, refused
    if ddpspawn's reading of it disagrees with Lightning's."""
    context = ddpspawn.Context.from_env(backend=backend, timeout=timeout)
    ours = (context.rank, context.world_size)
    theirs = (cluster_environment.global_rank(), cluster_environment.world_size())
    if ours != theirs:
        context.close()
        raise InvalidArgumentError(
            f"{what}: ddpspawn reads this process as rank {ours[0]} of {ours[1]} "
            f"({context.environment}), Lightning's {type(cluster_environment).__name__} as rank "
            f"{theirs[0]} of {theirs[1]}; check devices and num_nodes against the job's shape")
    wait = timedelta(seconds=timeout) if timeout is not None else timedelta(minutes=30)
    if context.environment == "torchelastic":
        # torchrun's agent hosts the store (MASTER_ADDR, MASTER_PORT): torch's group meets there,
        # as Lightning's own strategy makes it.
        init_dist_connection(cluster_environment, backend, timeout=wait)
    elif not dist.is_initialized():
        # ddpspawn's rank 0 hosts a TCPStore at the address and port that it and Lightning read
        # from the environment (SLURM: the first node, 15000 + the job id's last four digits); a
        # second server there could not bind, so torch's group meets in that one, under a prefix.
        store = dist.TCPStore(cluster_environment.main_address, cluster_environment.main_port,
                              ours[1], is_master=False, timeout=wait)
        dist.init_process_group(backend, store=dist.PrefixStore("torch_distributed/", store),
                                rank=ours[0], world_size=ours[1], timeout=wait)
    atexit.register(_leave_cluster_job, context)
    return context


def _leave_cluster_job(context: ddpspawn.Context) -> None:
    """At the process's exit: torch's default group destroyed and ddpspawn's group left while the
    interpreter still runs. Left to the end of the process, a Gloo group's threads could still be
    joinable when its destructor runs, and std::terminate aborts the rank (SIGABRT: "terminate
    called without an active exception"), failing a job that had finished."""
    if dist.is_initialized():
        dist.destroy_process_group()
    context.close()


def op_name(reduce_op: Optional[Union[Any, str]]) -> Optional[str]:
    """"mean" or "sum" for Lightning's reduce_op; None for another (torch's path takes it)."""
    if reduce_op is None:
        return "mean"
    if isinstance(reduce_op, str):
        return {"mean": "mean", "avg": "mean", "sum": "sum"}.get(reduce_op.lower())
    from torch.distributed import ReduceOp

    if reduce_op == ReduceOp.SUM:
        return "sum"
    if reduce_op == ReduceOp.AVG:
        return "mean"
    return None


def reduce_through(context: Optional[ddpspawn.Context], tensor: Any, group: Optional[Any],
                   reduce_op: Optional[Union[Any, str]],
                   torch_path: Callable[[], Any]) -> Any:
    """Lightning's reduce: float sums and means through ddpspawn's group, anything else by
    `torch_path` (torch.distributed's); a non-tensor passes through unchanged."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    op = op_name(reduce_op)
    if group is not None or context is None or op is None or not tensor.is_floating_point():
        return torch_path()
    # A copy, contiguous: the caller's tensor is left as it was (as torch's sync does to a
    # clone), and ddpspawn reduces in place.
    return context.all_reduce(tensor.detach().clone().contiguous(), op)


def unwrap(module: Any) -> Any:
    """The user's module inside ddpspawn's DDP wrapper (or `module` itself)."""
    if isinstance(module, ddpspawn_torch.DistributedDataParallel):
        return module.module
    return module


def to_bytes(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)
