"""Lightning's Trainer on ddpspawn: ``Trainer(strategy=DDPSpawnStrategy())``, or
``strategy="ddpspawn"`` (also ``"ddpspawn_spawn"``, ``"ddpspawn_fork"``,
``"ddpspawn_forkserver"``) once this module is imported.

The ranks are started by ddpspawn's launcher (forkserver by default: one fresh
interpreter loads torch and the main script once and forks every rank), join
ddpspawn's group, and have torch.distributed's default group over the same
ranks (Lightning and user code call it). Gradients are averaged by ddpspawn's
reducer (:class:`ddpspawn.torch.DistributedDataParallel`), and the strategy's
``barrier``, ``broadcast`` and ``reduce`` go through ddpspawn's collectives.
After ``fit`` the launching process has rank 0's weights, ``callback_metrics``,
``logged_metrics``, ``checkpoint_callback.best_model_path`` (as Lightning's own
spawn) and also the optimizers and learning-rate schedulers with their state
(``trainer.optimizers``, which Lightning's spawn leaves empty).

This is ``pytorch_lightning`` 2.6's API (``lightning.pytorch`` is not
supported yet). Lightning stays optional: ``import ddpspawn`` never imports
this module. What is refused, each with an error that says so: a comm hook of
one's own (torch's built-in ones run as ddpspawn's), ``ddp_comm_wrapper``,
``model_averaging_period``, ``static_graph=True``, DDP options other than
``find_unused_parameters``, ``gradient_as_bucket_view``, ``bucket_cap_mb`` and
``broadcast_buffers``, the ``popen`` start method and several nodes.

A second ``fit`` of the same Trainer continues where the first ended, as it does
in one process (Lightning's spawn refuses it): rank 0's whole training state
(Lightning's checkpoint, kept in the launching process's memory) is handed to
the new ranks as ``ckpt_path`` in a private temporary directory, unless the
call names a ``ckpt_path`` itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from datetime import timedelta
from typing import Any, Callable, Dict, Generator, List, Literal, Optional, Tuple, Union

import torch

try:
    from lightning_fabric.utilities import move_data_to_device
    from lightning_fabric.utilities.distributed import _set_num_threads_if_needed
    from pytorch_lightning.core.optimizer import _init_optimizers_and_lr_schedulers
    from pytorch_lightning.strategies import DDPStrategy, StrategyRegistry
    from pytorch_lightning.strategies.launchers.launcher import _Launcher
    from pytorch_lightning.strategies.launchers.multiprocessing import _GlobalStateSnapshot
    from pytorch_lightning.trainer.states import TrainerFn
    from lightning_fabric.utilities.seed import reset_seed
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ddpspawn.lightning needs Lightning 2.6: pip install 'pytorch-lightning==2.6.*'"
    ) from error

import ddpspawn
import ddpspawn.torch as ddpspawn_torch

from ._errors import InvalidArgumentError

__all__ = ["DDPSpawnStrategy"]

# torch DDP's options that the ddpspawn wrapper honours, under the same names.
_DDP_OPTIONS = ("find_unused_parameters", "gradient_as_bucket_view", "bucket_cap_mb",
                "broadcast_buffers")
_START_METHODS = ("spawn", "fork", "forkserver")


def _comm_hook_options(hook: Optional[Callable[..., Any]], state: Optional[object],
                       wrapper: Optional[Callable[..., Any]]) -> Dict[str, Any]:
    """The wrapper's comm_hook options for torch's built-in hook `hook` with `state`."""
    if wrapper is not None:
        raise InvalidArgumentError(
            "DDPSpawnStrategy: ddp_comm_wrapper is not supported yet (ddpspawn's Python DDP "
            "wrapper has no compression wrapper); pass ddp_comm_hook=fp16_compress_hook or "
            "bf16_compress_hook instead"
        )
    if hook is None:
        return {}
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    by_hook = {default_hooks.allreduce_hook: "allreduce",
               default_hooks.fp16_compress_hook: "fp16",
               default_hooks.bf16_compress_hook: "bf16",
               powerSGD_hook.powerSGD_hook: "powersgd",
               powerSGD_hook.batched_powerSGD_hook: "batched_powersgd"}
    name = by_hook.get(hook)
    if name is None:
        raise InvalidArgumentError(
            f"DDPSpawnStrategy: ddp_comm_hook {getattr(hook, '__qualname__', hook)!r} is not one "
            "of torch's built-in hooks (allreduce, fp16, bf16, powerSGD, batched powerSGD), which "
            "ddpspawn runs as its own; a hook of your own is not supported yet"
        )
    if "powersgd" not in name:
        return {"comm_hook": name}
    if not isinstance(state, powerSGD_hook.PowerSGDState):
        raise InvalidArgumentError(
            f"DDPSpawnStrategy: ddp_comm_hook {hook.__qualname__} needs ddp_comm_state, a "
            "PowerSGDState"
        )
    if not state.use_error_feedback or not state.warm_start:
        raise InvalidArgumentError(
            "DDPSpawnStrategy: ddpspawn's PowerSGD always uses error feedback and warm start; "
            "a PowerSGDState with use_error_feedback or warm_start False is not supported"
        )
    return {"comm_hook": name, "powersgd_rank": state.matrix_approximation_rank,
            "powersgd_start_iteration": state.start_powerSGD_iter}


def _to_bytes(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


class DDPSpawnStrategy(DDPStrategy):
    """Lightning's ``DDPStrategy`` with ddpspawn's launcher, group and reducer.

    Takes ``DDPStrategy``'s arguments. ``start_method`` is ``"forkserver"``
    (the default), ``"spawn"`` or ``"fork"`` (notebooks); ``ddp_comm_hook``
    one of torch's built-in hooks (``ddp_comm_state`` a ``PowerSGDState`` for
    PowerSGD). DDP options as keywords: ``find_unused_parameters``,
    ``gradient_as_bucket_view``, ``bucket_cap_mb``, ``broadcast_buffers``.
    Anything else is refused here, before any rank starts.
    """

    strategy_name = "ddpspawn"

    def __init__(
        self,
        accelerator: Optional[Any] = None,
        parallel_devices: Optional[List[torch.device]] = None,
        cluster_environment: Optional[Any] = None,
        checkpoint_io: Optional[Any] = None,
        precision_plugin: Optional[Any] = None,
        ddp_comm_state: Optional[object] = None,
        ddp_comm_hook: Optional[Callable[..., Any]] = None,
        ddp_comm_wrapper: Optional[Callable[..., Any]] = None,
        model_averaging_period: Optional[int] = None,
        process_group_backend: Optional[str] = None,
        timeout: Optional[timedelta] = None,
        start_method: Literal["spawn", "fork", "forkserver"] = "forkserver",
        **kwargs: Any,
    ) -> None:
        if start_method not in _START_METHODS:
            raise InvalidArgumentError(
                f"DDPSpawnStrategy: start_method {start_method!r} is not one of "
                f"{', '.join(_START_METHODS)} (ddpspawn's launcher starts the ranks; 'popen', "
                "Lightning's script launcher, is not supported)"
            )
        if model_averaging_period is not None:
            raise InvalidArgumentError(
                "DDPSpawnStrategy: model_averaging_period (post-local SGD) is not supported yet"
            )
        if kwargs.get("static_graph"):
            raise InvalidArgumentError(
                "DDPSpawnStrategy: static_graph=True is not supported yet (ddpspawn's Python DDP "
                "wrapper has no static graph)"
            )
        kwargs.pop("static_graph", None)
        unknown = sorted(set(kwargs) - set(_DDP_OPTIONS))
        if unknown:
            raise InvalidArgumentError(
                f"DDPSpawnStrategy: DDP option(s) {', '.join(unknown)} not supported; it takes "
                f"{', '.join(_DDP_OPTIONS)}"
            )
        self._comm_hook_options = _comm_hook_options(ddp_comm_hook, ddp_comm_state,
                                                     ddp_comm_wrapper)
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            **kwargs,
        )
        # Set in each rank by the launcher: this rank's membership in ddpspawn's group.
        self._ddpspawn_context: Optional[ddpspawn.Context] = None

    # -- the launcher and the group ---------------------------------------------

    def _configure_launcher(self) -> None:
        if self.num_nodes != 1:
            raise InvalidArgumentError(
                "DDPSpawnStrategy: num_nodes > 1 is not supported yet (one launcher's ranks)"
            )
        self._launcher = _DdpspawnLauncher(self, self._start_method)

    def setup_distributed(self) -> None:
        ctx = self._ddpspawn_context
        if ctx is None:
            raise InvalidArgumentError(
                "DDPSpawnStrategy runs in ranks started by its own launcher (Trainer.fit and "
                "friends); this process was not started by it"
            )
        reset_seed()
        self.set_world_ranks()
        self._process_group_backend = self._get_process_group_backend()
        timeout = self._timeout.total_seconds() if self._timeout is not None else None
        ddpspawn_torch.init_process_group(ctx, backend=self._process_group_backend,
                                          timeout=timeout)

    def _get_process_group_backend(self) -> str:
        backend = self._process_group_backend or (
            "nccl" if self.root_device.type == "cuda" else "gloo")
        if backend not in ("gloo", "nccl"):
            raise InvalidArgumentError(
                f"DDPSpawnStrategy: process_group_backend {backend!r} is not gloo or nccl"
            )
        return str(backend)

    # -- the model ---------------------------------------------------------------

    def _setup_model(self, model: torch.nn.Module) -> ddpspawn_torch.DistributedDataParallel:
        assert self._ddpspawn_context is not None
        return ddpspawn_torch.DistributedDataParallel(
            model, self._ddpspawn_context, **self._ddp_kwargs, **self._comm_hook_options
        )

    def _register_ddp_hooks(self) -> None:
        """The comm hook went to the wrapper when it was made."""

    def pre_backward(self, closure_loss: torch.Tensor) -> None:
        """ddpspawn's wrapper hooks every parameter's gradient itself."""

    def post_backward(self, closure_loss: torch.Tensor) -> None:
        """Nothing: no static graph."""

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        if isinstance(self.model, ddpspawn_torch.DistributedDataParallel):
            with self.model.no_sync():
                yield None
        else:
            yield None

    def teardown(self) -> None:
        if isinstance(self.model, ddpspawn_torch.DistributedDataParallel):
            self.model.close()
            self.model = self.lightning_module
        super().teardown()

    # -- collectives, through ddpspawn's group ------------------------------------

    def barrier(self, name: Optional[str] = None, *args: Any, **kwargs: Any) -> None:
        if self._ddpspawn_context is not None:
            self._ddpspawn_context.barrier(name)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if self._ddpspawn_context is None:
            return obj
        return self._ddpspawn_context.broadcast_object(obj, src)

    def reduce(self, tensor: Any, group: Optional[Any] = None,
               reduce_op: Optional[Union[Any, str]] = "mean") -> Any:
        if not isinstance(tensor, torch.Tensor):
            return tensor
        op = _op_name(reduce_op)
        if (group is not None or self._ddpspawn_context is None or op is None
                or not tensor.is_floating_point()):
            return super().reduce(tensor, group=group, reduce_op=reduce_op)
        # A copy, contiguous: the caller's tensor is left as it was (as torch's sync does to
        # a clone), and ddpspawn reduces in place.
        result = tensor.detach().clone().contiguous()
        return self._ddpspawn_context.all_reduce(result, op)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register("ddpspawn", cls, description="ddpspawn's DDP, forkserver",
                                   start_method="forkserver")
        for method in _START_METHODS:
            strategy_registry.register(f"ddpspawn_{method}", cls,
                                       description=f"ddpspawn's DDP, {method}",
                                       start_method=method)


def _op_name(reduce_op: Optional[Union[Any, str]]) -> Optional[str]:
    """"mean" or "sum" for Lightning's reduce_op; None for another (torch's path takes it)."""
    if reduce_op is None:
        return "mean"
    if isinstance(reduce_op, str):
        name = reduce_op.lower()
        return {"mean": "mean", "avg": "mean", "sum": "sum"}.get(name)
    from torch.distributed import ReduceOp

    if reduce_op == ReduceOp.SUM:
        return "sum"
    if reduce_op == ReduceOp.AVG:
        return "mean"
    return None


class _DdpspawnLauncher(_Launcher):
    """Runs the Trainer's function in ddpspawn's ranks and brings rank 0's state back."""

    # The positional index of ckpt_path in the arguments Trainer.fit hands to _fit_impl.
    _FIT_CKPT_PATH = 4

    def __init__(self, strategy: DDPSpawnStrategy, start_method: str) -> None:
        self._strategy = strategy
        self._start_method = start_method
        # Rank 0's training state at the end of the last fit (a Lightning checkpoint, as bytes).
        self._last_fit_state: Optional[bytes] = None

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_last_fit_state"] = None  # the ranks get it as a file, not inside the Trainer
        return state

    @property
    def is_interactive_compatible(self) -> bool:
        return self._start_method == "fork"

    def launch(self, function: Callable[..., Any], *args: Any,
               trainer: Optional[Any] = None, **kwargs: Any) -> Any:
        fitting = trainer is not None and trainer.state.fn == TrainerFn.FITTING
        resume_dir = None
        if (fitting and self._last_fit_state is not None and len(args) > self._FIT_CKPT_PATH
                and args[self._FIT_CKPT_PATH] is None):
            # A second fit: it continues from where the last one ended.
            resume_dir = tempfile.mkdtemp(prefix="ddpspawn-lightning-")  # mode 0700
            path = os.path.join(resume_dir, "last_fit.ckpt")
            with open(path, "xb") as file:
                file.write(self._last_fit_state)
            args = args[:self._FIT_CKPT_PATH] + (path,) + args[self._FIT_CKPT_PATH + 1:]
        snapshot = _GlobalStateSnapshot.capture() if self._start_method != "fork" else None
        try:
            output = ddpspawn.spawn(
                _run_rank,
                args=(trainer, function, args, kwargs, snapshot),
                nprocs=self._strategy.num_processes,
                start_method=self._start_method,
                backend=self._strategy._get_process_group_backend(),
            )
        finally:
            if resume_dir is not None:
                shutil.rmtree(resume_dir, ignore_errors=True)
        if trainer is None:
            return output
        if output["fit_state"] is not None:
            self._last_fit_state = output["fit_state"]
        _recover_in_launcher(trainer, output)
        return output["results"]

    def kill(self, signum: Any) -> None:
        """Nothing: ddpspawn's launcher passes SIGINT and SIGTERM on to every rank itself."""


def _run_rank(ctx: ddpspawn.Context, trainer: Optional[Any], function: Callable[..., Any],
              args: Tuple[Any, ...], kwargs: Dict[str, Any],
              snapshot: Optional[Any]) -> Optional[Dict[str, Any]]:
    """One rank: the Trainer's function with ddpspawn's context, then rank 0's state."""
    if snapshot is not None:
        snapshot.restore()
    strategy = trainer.strategy if trainer is not None else None
    if strategy is not None:
        strategy._ddpspawn_context = ctx
    _set_num_threads_if_needed(num_processes=ctx.world_size)
    results = function(*args, **kwargs)
    if trainer is None:
        return results if ctx.rank == 0 else None
    return _rank_zero_state(trainer, results) if ctx.rank == 0 else None


def _rank_zero_state(trainer: Any, results: Any) -> Dict[str, Any]:
    """What the launcher takes back: weights, metrics, the best checkpoint's path and, after a
    fit, the optimizers' and schedulers' state."""
    callback = trainer.checkpoint_callback
    fitting = trainer.state.fn == TrainerFn.FITTING
    module = trainer.lightning_module
    return {
        "results": move_data_to_device(results, "cpu"),
        "trainer_state": trainer.state,
        "best_model_path": getattr(callback, "best_model_path", None) if callback else None,
        "weights": _to_bytes(module.state_dict()) if fitting else None,
        "callback_metrics": _to_bytes(move_data_to_device(dict(trainer.callback_metrics), "cpu")),
        "logged_metrics": _to_bytes(move_data_to_device(dict(trainer.logged_metrics), "cpu")),
        "optimizers": _to_bytes([o.state_dict() for o in trainer.optimizers]) if fitting else None,
        "lr_schedulers": _to_bytes([c.scheduler.state_dict() for c in trainer.lr_scheduler_configs])
        if fitting else None,
        # Everything a later fit of this Trainer continues from: Lightning's own checkpoint.
        "fit_state": _to_bytes(trainer._checkpoint_connector.dump_checkpoint(weights_only=False))
        if fitting else None,
    }


def _recover_in_launcher(trainer: Any, output: Dict[str, Any]) -> None:
    callback = trainer.checkpoint_callback
    if callback is not None and hasattr(callback, "best_model_path"):
        callback.best_model_path = str(output["best_model_path"])
    module = trainer.lightning_module
    if output["weights"] is not None:
        module.load_state_dict(_from_bytes(output["weights"]), strict=False)
    trainer.state = output["trainer_state"]
    trainer._logger_connector._callback_metrics.update(_from_bytes(output["callback_metrics"]))
    trainer._logger_connector._logged_metrics.update(_from_bytes(output["logged_metrics"]))
    if output["fit_state"] is not None:
        # The loops' progress (current_epoch, global_step), which Lightning's spawn leaves at 0.
        trainer.fit_loop.load_state_dict(_from_bytes(output["fit_state"])["loops"]["fit_loop"])
    if output["optimizers"] is None:
        return
    # The optimizers and schedulers over this process's module, with rank 0's state.
    module.trainer = trainer
    optimizers, scheduler_configs = _init_optimizers_and_lr_schedulers(module)
    for optimizer, state in zip(optimizers, _from_bytes(output["optimizers"])):
        optimizer.load_state_dict(state)
    for config, state in zip(scheduler_configs, _from_bytes(output["lr_schedulers"])):
        config.scheduler.load_state_dict(state)
    trainer.strategy.optimizers = optimizers
    trainer.strategy.lr_scheduler_configs = scheduler_configs


if "ddpspawn" not in StrategyRegistry:
    DDPSpawnStrategy.register_strategies(StrategyRegistry)
