"""``DistributedDataParallel`` for your own torch ``nn.Module``, on
libddpspawn's gradient reducer (through DLPack, shapes included).

Glue only: each parameter's post-accumulate-grad hook hands its gradient to
the C reducer (``ddpspawn_reducer_mark_ready``), which starts a bucket's
all-reduce as soon as the bucket is complete, while backward goes on; a
callback queued on autograd's engine runs ``ddpspawn_reducer_finalize`` when
backward ends. Bucketing, ordering, comm hooks and unused-parameter handling
are the library's. Importing this module imports torch (the rest of
``ddpspawn`` does not need it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Union

import torch

from . import _torch_distributed
from ._errors import InvalidArgumentError
from ._reducer import Reducer
from ._train import export

if TYPE_CHECKING:  # pragma: no cover
    from ._comm_hook import CCommHook
    from ._context import CommHook, Context

__all__ = ["DistributedDataParallel", "init_process_group", "load_weights"]


class DistributedDataParallel(torch.nn.Module):  # type: ignore[misc]  # torch is Any to mypy
    """Wraps ``module`` so that ``loss.backward()`` leaves every rank's
    gradients averaged over the ranks of ``context`` (PyTorch's
    ``DistributedDataParallel``, on ddpspawn's reducer).

    On creation it broadcasts rank 0's parameters and buffers to the other
    ranks, gives every parameter that requires a gradient a fixed gradient
    tensor (``p.grad``; ``zero_grad(set_to_none=True)`` still works: a new
    gradient is copied into it once per backward) and hooks them. The fixed
    gradients live in the reducer's buckets (shared memory between a
    launcher's ranks: PyTorch's ``gradient_as_bucket_view``), so nothing is
    copied into the buckets or back; with ``find_unused_parameters`` they are
    the wrapper's own tensors, copied both ways (an unused one must stay
    untouched). Buckets of
    gradients (reverse parameter order, ``bucket_cap_mb`` each, the
    library's defaults, with a small first bucket, when not given) are
    reduced while backward runs.

    Options as PyTorch's: ``bucket_cap_mb``, ``find_unused_parameters``
    (a parameter that no rank used keeps its gradient, ``None`` included;
    one that another rank used gets the mean), ``broadcast_buffers``
    (rank 0's buffers before each forward in training), :meth:`no_sync`, and
    the comm hook by name: ``"allreduce"``, ``"fp16"``, ``"bf16"``,
    ``"powersgd"`` or ``"batched_powersgd"`` (``powersgd_rank``,
    ``powersgd_start_iteration``), or written in Python: a callable
    ``hook(context, bucket)`` (see :meth:`ddpspawn.Context.reducer`), or in C:
    a :class:`ddpspawn.CCommHook`.
    ``gradient_as_bucket_view`` changes nothing (the gradients are bucket
    views already) and is refused with ``find_unused_parameters``.

    Every rank must wrap the same architecture with the same options, and
    run the same number of backward passes. The model's parameters must be
    CPU tensors (CUDA ones need a GPU, checked by ``tools/gpu_check``).

    Not supported yet: reentrant activation checkpointing
    (``use_reentrant=True``), and a backward pass that raises halfway (the
    next ``forward`` says so; create the wrapper again). Every backward that
    reaches the parameters communicates, as the hooks decide, not forward.

    Thread safety: one training loop at a time, as with PyTorch's. Close it
    with :meth:`close`; closing its context closes its reducer, after which a
    backward through the module raises.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        context: "Context",
        *,
        bucket_cap_mb: Optional[float] = None,
        find_unused_parameters: bool = False,
        broadcast_buffers: bool = True,
        gradient_as_bucket_view: bool = False,
        comm_hook: Union[str, "CommHook", "CCommHook"] = "allreduce",
        powersgd_rank: Optional[int] = None,
        powersgd_start_iteration: Optional[int] = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, not {type(module).__name__}")
        if gradient_as_bucket_view and find_unused_parameters:
            raise InvalidArgumentError(
                "gradient_as_bucket_view=True with find_unused_parameters=True is not "
                "supported: an unused parameter's gradient must stay untouched, and a bucket's "
                "slot is zeroed; the gradients stay outside the buckets with "
                "find_unused_parameters"
            )
        self.module = module
        self._context = context
        self._broadcast_buffers = broadcast_buffers
        parameters = [p for p in module.parameters() if p.requires_grad]
        if not parameters:
            raise InvalidArgumentError("the module has no parameter that requires a gradient")
        if not isinstance(comm_hook, str) and any(p.device.type != "cpu" for p in parameters):
            device = next(p.device for p in parameters if p.device.type != "cpu")
            raise InvalidArgumentError(
                f"a comm hook written in Python or C averages buckets in CPU memory, and the "
                f"module has parameters on {device}: use a built-in hook by name"
            )
        for name, submodule in module.named_modules():
            if getattr(submodule, "sparse", False) is True:
                raise InvalidArgumentError(
                    f"{name or 'the module'} has sparse gradients (sparse=True); the reducer "
                    "averages dense ones only"
                )
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                context.broadcast(tensor.detach(), 0)
        self._parameters_list = parameters
        self._gradients = [self._fixed_gradient(p) for p in parameters]
        self.reducer: Reducer = context.reducer(
            self._gradients,
            # As PyTorch's: the library's default buckets (a small first one) unless a cap is
            # given, which the first bucket takes too.
            bucket_cap_mb=bucket_cap_mb,
            first_bucket_cap_mb=bucket_cap_mb,
            comm_hook=comm_hook,
            powersgd_rank=powersgd_rank,
            powersgd_start_iteration=powersgd_start_iteration,
            find_unused_parameters=find_unused_parameters,
        )
        if not find_unused_parameters:
            # gradient_as_bucket_view: the gradients live in the reducer's buckets (shared
            # memory between a launcher's ranks), so that neither marking nor finalizing copies
            # them. (With find_unused_parameters an unused gradient must stay untouched, which a
            # bucket's slot is not.)
            self._gradients = [
                torch.from_dlpack(slot) for slot in self.reducer.buffers_in_buckets()
            ]
            for parameter, gradient in zip(parameters, self._gradients):
                if parameter.grad is not None:
                    parameter.grad = gradient
        self._marked = [False] * len(parameters)
        self._in_backward = False
        self._hooks = [
            p.register_post_accumulate_grad_hook(functools.partial(self._gradient_ready, i))
            for i, p in enumerate(parameters)
        ]

    @staticmethod
    def _fixed_gradient(parameter: torch.Tensor) -> torch.Tensor:
        # A gradient that is None stays None until backward gives one.
        gradient = torch.zeros_like(parameter, memory_format=torch.contiguous_format)
        if parameter.grad is not None:
            gradient.copy_(parameter.grad)
            parameter.grad = gradient
        return gradient

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self._in_backward:
            raise RuntimeError(
                "the previous backward pass through this DistributedDataParallel did not "
                "finish (it raised after some gradients were handed over), so the ranks' "
                "reducers disagree: create the wrapper again"
            )
        if self._broadcast_buffers and self.module.training and torch.is_grad_enabled():
            with torch.no_grad():
                for buffer in self.module.buffers():
                    self._context.broadcast(buffer.detach(), 0)
        return self.module(*inputs, **kwargs)

    # -- autograd's side ---------------------------------------------------

    def _gradient_ready(self, index: int, parameter: torch.Tensor) -> None:
        if not self._in_backward:
            self._in_backward = True
            # Runs once autograd's engine has finished this backward pass.
            torch.autograd.Variable._execution_engine.queue_callback(
                self._backward_done
            )
        fixed = self._gradients[index]
        if parameter.grad is not fixed:  # a new tensor after zero_grad(set_to_none=True)
            with torch.no_grad():  # never part of a double-backward graph
                fixed.copy_(parameter.grad.detach())
            parameter.grad = fixed
        self._marked[index] = True
        self.reducer.mark_ready(index)

    def _backward_done(self) -> None:
        self._in_backward = False
        marked, self._marked = self._marked, [False] * len(self._marked)
        self.reducer.finalize()
        for index, parameter in enumerate(self._parameters_list):
            # Unused here: the mean of the others' gradients may have arrived.
            if not marked[index] and self.reducer.written(index):
                parameter.grad = self._gradients[index]

    # -- PyTorch's DDP API -------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self, enabled: bool = True) -> Iterator["DistributedDataParallel"]:
        """Backward passes inside accumulate gradients locally, without
        communication; the first one after the block averages the sum.
        ``enabled=False`` changes nothing (a conditional no_sync in one line:
        ``with ddp.no_sync(skip_sync):``)."""
        with self.reducer.no_sync(enabled):
            yield self

    def close(self) -> None:
        """Removes the gradient hooks and closes the reducer. Safe to repeat."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self.reducer.close()


def init_process_group(
    ctx: Context, backend: str = "gloo", timeout: Optional[float] = None
) -> None:
    """torch.distributed's default group over ``ctx``'s ranks, as under ``mp.spawn``.

    Call it at the start of fn, in every rank of :func:`ddpspawn.spawn` (on
    one node), with ctx's backend; then ``DistributedSampler(dataset)``,
    ``dist.get_rank()`` and ``dist.all_reduce`` work unchanged. The ranks meet
    through the launcher's private directory (no port), and the group is
    destroyed when fn returns. Code that calls
    ``torch.distributed.init_process_group`` itself needs none of this: every
    rank has ``MASTER_ADDR`` and ``MASTER_PORT``.
    """
    _torch_distributed.init(ctx.rank, ctx.world_size, backend, timeout)


def load_weights(checkpoint: str, module: torch.nn.Module, *, strict: bool = True) -> List[str]:
    """Puts the weights of a ddpspawn checkpoint (``last.ckpt``, a
    ``model_checkpoint`` file, or an export) into ``module``, by parameter
    and buffer name, like ``module.load_state_dict``: the checkpoint is
    exported (:func:`ddpspawn.export`) into a private temporary directory and
    read back with ``torch.load(weights_only=True)``. Returns the names
    loaded.

    ``strict`` is ``load_state_dict``'s: a name missing on either side is a
    ``RuntimeError`` naming it; a shape that differs always is. A
    :class:`DistributedDataParallel` gets the weights into its ``module``.
    """
    if isinstance(module, DistributedDataParallel):
        module = module.module
    with tempfile.TemporaryDirectory(prefix="ddpspawn-weights-") as directory:
        path = os.path.join(directory, "weights.pt")
        export(checkpoint, path, format="torch")
        weights = torch.load(path, map_location="cpu", weights_only=True)
    module.load_state_dict(weights, strict=strict)
    state = module.state_dict()
    return [name for name in weights if name in state]
