"""DDPSpawnFabricStrategy: Lightning Fabric on ddpspawn's launcher, group and reducer.

``Fabric(strategy=DDPSpawnFabricStrategy())`` (or ``strategy="ddpspawn"``) and
``fabric.launch(train)``: ddpspawn's launcher starts the ranks, each joins
ddpspawn's group and torch.distributed's, ``fabric.setup`` wraps the model in
ddpspawn's reducer, ``fabric.no_backward_sync`` skips its communication, and
``fabric.all_reduce``/``barrier``/``broadcast`` go through ddpspawn's
collectives. As with Fabric's own spawn strategies, ``launch`` returns rank 0's
return value. The methods are package-independent;
:func:`_packages.strategy_class` puts them over ``lightning.fabric``'s or
``lightning_fabric``'s ``DDPStrategy``.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, Callable, ContextManager, Dict, List, Literal, Optional, Union

import torch

import ddpspawn
import ddpspawn.torch as ddpspawn_torch

from .._errors import InvalidArgumentError
from . import _common, _packages
from ._strategy_base import SpawnStrategyBase

_WHAT = "DDPSpawnFabricStrategy"


class _BackwardSyncControl:
    """Fabric's ``no_backward_sync`` for ddpspawn's DDP wrapper."""

    def no_backward_sync(self, module: Any, enabled: bool) -> ContextManager[Any]:
        if not enabled:
            return contextlib.nullcontext()
        if not isinstance(module, ddpspawn_torch.DistributedDataParallel):
            raise TypeError(
                f"{_WHAT}: no_backward_sync needs a module that fabric.setup wrapped in ddpspawn's "
                f"DistributedDataParallel; got {type(module).__name__}")
        return module.no_sync()


class DDPSpawnFabricStrategy(SpawnStrategyBase):
    """Fabric's ``DDPStrategy`` with ddpspawn's launcher, group and reducer.

    Takes ``DDPStrategy``'s arguments (``precision``, not ``precision_plugin``,
    as Fabric's), ``start_method`` (``"forkserver"``, the default, ``"spawn"``
    or ``"fork"``), ``ddp_comm_hook``/``ddp_comm_state``/``ddp_comm_wrapper``
    (as the Trainer's strategy takes them), the DDP options ``find_unused_parameters``,
    ``gradient_as_bucket_view``, ``bucket_cap_mb`` and ``broadcast_buffers``,
    and ``package`` (``"lightning.fabric"`` or ``"lightning_fabric"``; by
    default the one the program imported). Anything else is refused here.
    """

    WHAT = _WHAT
    PACKAGES = _packages.FABRIC_PACKAGES

    def __init__(
        self,
        accelerator: Optional[Any] = None,
        parallel_devices: Optional[List[torch.device]] = None,
        cluster_environment: Optional[Any] = None,
        checkpoint_io: Optional[Any] = None,
        precision: Optional[Any] = None,
        ddp_comm_state: Optional[object] = None,
        ddp_comm_hook: Optional[Callable[..., Any]] = None,
        ddp_comm_wrapper: Optional[Callable[..., Any]] = None,
        process_group_backend: Optional[str] = None,
        timeout: Optional[timedelta] = None,
        start_method: Literal["spawn", "fork", "forkserver"] = "forkserver",
        package: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        kwargs = self._check_arguments(start_method, None, ddp_comm_hook, ddp_comm_state,
                                       ddp_comm_wrapper, kwargs)
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision=precision,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            **kwargs,
        )
        self._backward_sync_control = _BackwardSyncControl()

    def _make_launcher(self) -> "_FabricLauncher":
        return _FabricLauncher(self, self._start_method)

    def _setup_distributed(self) -> None:
        self._set_world_ranks()
        self._join_group()

    def setup_module(self, module: torch.nn.Module) -> ddpspawn_torch.DistributedDataParallel:
        return self._wrap(module)

    def get_module_state_dict(self, module: torch.nn.Module) -> Dict[str, Any]:
        return super().get_module_state_dict(_common.unwrap(module))  # type: ignore[no-any-return]

    def load_module_state_dict(self, module: torch.nn.Module, state_dict: Dict[str, Any],
                               strict: bool = True) -> None:
        super().load_module_state_dict(_common.unwrap(module), state_dict, strict=strict)

    def all_reduce(self, tensor: Any, group: Optional[Any] = None,
                   reduce_op: Optional[Union[Any, str]] = "mean") -> Any:
        return _common.reduce_through(
            self._ddpspawn_context, tensor, group, reduce_op,
            lambda: super(DDPSpawnFabricStrategy, self).all_reduce(tensor, group=group,
                                                                    reduce_op=reduce_op))


class _FabricLauncher:
    """Runs ``fabric.launch``'s function in ddpspawn's ranks; returns rank 0's result (Fabric's
    ``_Launcher`` interface)."""

    def __init__(self, strategy: DDPSpawnFabricStrategy, start_method: str) -> None:
        self._strategy = strategy
        self._start_method = start_method

    @property
    def is_interactive_compatible(self) -> bool:
        return self._start_method == "fork"

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        lightning = self._strategy._lightning
        if getattr(function, "args", (None,))[0] is lightning.do_nothing:
            raise InvalidArgumentError(
                f"{_WHAT} starts the ranks itself: call fabric.launch(function) with the function "
                "that trains (it gets the Fabric object), as with Fabric's ddp_spawn")
        snapshot = (lightning.global_state_snapshot.capture()
                    if self._start_method != "fork" else None)
        return ddpspawn.spawn(
            _run_rank,
            args=(self._strategy, function, args, kwargs, snapshot),
            nprocs=self._strategy.num_processes,
            start_method=self._start_method,
            backend=self._strategy._get_process_group_backend(),
        )


def _run_rank(ctx: ddpspawn.Context, strategy: DDPSpawnFabricStrategy,
              function: Callable[..., Any], args: Any, kwargs: Dict[str, Any],
              snapshot: Optional[Any]) -> Any:
    """One rank: the launched function with ddpspawn's context; rank 0's result on the CPU."""
    if snapshot is not None:
        snapshot.restore()
    strategy._ddpspawn_context = ctx
    strategy._lightning.set_num_threads_if_needed(num_processes=ctx.world_size)
    results = function(*args, **kwargs)
    return strategy._lightning.move_data_to_device(results, "cpu") if ctx.rank == 0 else None
