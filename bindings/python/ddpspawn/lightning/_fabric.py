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
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, List, Literal, Optional, Union

import torch

import ddpspawn
import ddpspawn.torch as ddpspawn_torch

from .._errors import InvalidArgumentError
from . import _common, _packages

if TYPE_CHECKING:
    _Base = Any
else:
    _Base = object

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


class DDPSpawnFabricStrategy(_Base):  # type: ignore[misc]
    """Fabric's ``DDPStrategy`` with ddpspawn's launcher, group and reducer.

    Takes ``DDPStrategy``'s arguments (``precision``, not ``precision_plugin``,
    as Fabric's), ``start_method`` (``"forkserver"``, the default, ``"spawn"``
    or ``"fork"``), ``ddp_comm_hook``/``ddp_comm_state``/``ddp_comm_wrapper``
    (as the Trainer's strategy takes them), the DDP options ``find_unused_parameters``,
    ``gradient_as_bucket_view``, ``bucket_cap_mb`` and ``broadcast_buffers``,
    and ``package`` (``"lightning.fabric"`` or ``"lightning_fabric"``; by
    default the one the program imported). Anything else is refused here.
    """

    _lightning: _packages.Api

    def __new__(cls, *args: Any, package: Optional[str] = None, **kwargs: Any) -> Any:
        if cls is DDPSpawnFabricStrategy:
            chosen = _packages.choose(_packages.FABRIC_PACKAGES, package, _WHAT)
            cls = _packages.strategy_class("DDPSpawnFabricStrategy", DDPSpawnFabricStrategy,
                                           chosen)
        return super().__new__(cls)

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
        kwargs = _common.check_options(_WHAT, start_method, None, kwargs)
        self._comm_hook_options = _common.comm_hook_options(ddp_comm_hook, ddp_comm_state,
                                                            ddp_comm_wrapper)
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
        # This rank's membership in ddpspawn's group (see DDPSpawnStrategy).
        self._ddpspawn_context: Optional[ddpspawn.Context] = None

    def _configure_launcher(self) -> None:
        if self.cluster_environment.creates_processes_externally:
            self._launcher = None  # torchrun, SLURM, `fabric run`: every rank runs the script
            return
        if self.num_nodes != 1:
            raise InvalidArgumentError(
                f"{_WHAT}: num_nodes > 1 needs a cluster's launcher (torchrun, SLURM) to start "
                "the ranks; ddpspawn's own launcher here starts one node's")
        self._launcher = _FabricLauncher(self, self._start_method)

    def _setup_distributed(self) -> None:
        self._set_world_ranks()
        self._process_group_backend = self._get_process_group_backend()
        timeout = self._timeout.total_seconds() if self._timeout is not None else None
        if self._ddpspawn_context is not None:
            ddpspawn_torch.init_process_group(self._ddpspawn_context,
                                              backend=self._process_group_backend,
                                              timeout=timeout)
        elif self.cluster_environment.creates_processes_externally:
            self._ddpspawn_context = _common.join_cluster_job(
                self.cluster_environment, self._process_group_backend, timeout,
                self._lightning.init_dist_connection, _WHAT)
        else:
            raise InvalidArgumentError(
                f"{_WHAT} runs in ranks started by fabric.launch(function) or by a cluster's "
                "launcher (torchrun, SLURM); this process was started by neither")

    def _get_process_group_backend(self) -> str:
        return _common.backend_for(self.root_device, self._process_group_backend, _WHAT)

    def setup_module(self, module: torch.nn.Module) -> ddpspawn_torch.DistributedDataParallel:
        assert self._ddpspawn_context is not None
        return ddpspawn_torch.DistributedDataParallel(
            module, self._ddpspawn_context, **self._ddp_kwargs, **self._comm_hook_options)

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

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        if self._ddpspawn_context is not None:
            self._ddpspawn_context.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if self._ddpspawn_context is None:
            return obj
        return self._ddpspawn_context.broadcast_object(obj, src)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register("ddpspawn", cls, description="ddpspawn's DDP, forkserver",
                                   start_method="forkserver")
        for method in _common.START_METHODS:
            strategy_registry.register(f"ddpspawn_{method}", cls,
                                       description=f"ddpspawn's DDP, {method}",
                                       start_method=method)


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
