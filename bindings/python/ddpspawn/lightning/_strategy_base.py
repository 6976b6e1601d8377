"""What the Trainer's and Fabric's ddpspawn strategies share, as a base class over the package's
``DDPStrategy``: picking the package's class, the arguments' checks, the launcher or a cluster's
job, the group, the DDP wrapper, ``barrier`` and ``broadcast``, and the registered names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import torch

import ddpspawn
import ddpspawn.torch as ddpspawn_torch

from .._errors import InvalidArgumentError
from . import _common, _packages

if TYPE_CHECKING:
    _Base = Any
else:
    _Base = object


class SpawnStrategyBase(_Base):  # type: ignore[misc]
    """The shared half of a ddpspawn strategy. A subclass names ``WHAT`` (its public name, for
    errors) and ``PACKAGES`` (the Lightning packages it is made for), and makes its launcher
    (``_make_launcher``). Not thread-safe, as Lightning's strategies are not."""

    WHAT = ""
    PACKAGES: Dict[str, str] = {}
    _lightning: _packages.Api

    def __new__(cls, *args: Any, package: Optional[str] = None, **kwargs: Any) -> Any:
        if getattr(cls, "_lightning", None) is None:  # the public class: pick the package's
            chosen = _packages.choose(cls.PACKAGES, package, cls.WHAT)
            cls = _packages.strategy_class(cls.__name__, cls, chosen)
        return super().__new__(cls)

    def _check_arguments(self, start_method: str, model_averaging_period: Optional[int],
                         hook: Optional[Callable[..., Any]], state: Optional[object],
                         wrapper: Optional[Callable[..., Any]],
                         kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Refuses what is not supported; keeps the comm hook's options; returns the DDP options
        of `kwargs`. Before the package's __init__, so that nothing starts on a refusal."""
        kwargs = _common.check_options(self.WHAT, start_method, model_averaging_period, kwargs)
        self._comm_hook_options = _common.comm_hook_options(self.WHAT, hook, state, wrapper)
        # This rank's membership in ddpspawn's group: set by the launcher in each rank, or made
        # when a cluster's launcher started the ranks.
        self._ddpspawn_context: Optional[ddpspawn.Context] = None
        return kwargs

    def _make_launcher(self) -> Any:
        raise NotImplementedError

    def _configure_launcher(self) -> None:
        if self.cluster_environment.creates_processes_externally:
            self._launcher = None  # torchrun, SLURM: every rank runs the program itself
            return
        if self.num_nodes != 1:
            raise InvalidArgumentError(
                f"{self.WHAT}: num_nodes > 1 needs a cluster's launcher (torchrun, SLURM) to "
                "start the ranks; ddpspawn's own launcher here starts one node's")
        self._launcher = self._make_launcher()

    def _join_group(self) -> None:
        """ddpspawn's group and torch.distributed's default group, in one of ddpspawn's
        launcher's ranks or a cluster's."""
        self._process_group_backend = self._get_process_group_backend()
        timeout = self._timeout.total_seconds() if self._timeout is not None else None
        if self._ddpspawn_context is not None:
            ddpspawn_torch.init_process_group(self._ddpspawn_context,
                                              backend=self._process_group_backend,
                                              timeout=timeout)
        elif self.cluster_environment.creates_processes_externally:
            self._ddpspawn_context = _common.join_cluster_job(
                self.cluster_environment, self._process_group_backend, timeout,
                self._lightning.init_dist_connection, self.WHAT)
        else:
            raise InvalidArgumentError(
                f"{self.WHAT} runs in ranks started by its own launcher or by a cluster's "
                "(torchrun, SLURM); this process was started by neither")

    def _get_process_group_backend(self) -> str:
        return _common.backend_for(self.root_device, self._process_group_backend, self.WHAT)

    def _wrap(self, module: torch.nn.Module) -> ddpspawn_torch.DistributedDataParallel:
        assert self._ddpspawn_context is not None
        return ddpspawn_torch.DistributedDataParallel(
            module, self._ddpspawn_context, **self._ddp_kwargs, **self._comm_hook_options)

    def barrier(self, name: Optional[str] = None, *args: Any, **kwargs: Any) -> None:
        if self._ddpspawn_context is not None:
            self._ddpspawn_context.barrier(name)

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
