"""DDPSpawnStrategy: Lightning's Trainer on ddpspawn's launcher, group and reducer.

The methods here are package-independent; :func:`_packages.strategy_class` puts
them over ``lightning.pytorch``'s or ``pytorch_lightning``'s ``DDPStrategy``
(``self._lightning`` holds that package's pieces). The launcher runs the
Trainer's function in ddpspawn's ranks and brings rank 0's whole state back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from datetime import timedelta
from typing import Any, Callable, Dict, Generator, List, Literal, Optional, Tuple, Union

import torch

import ddpspawn
import ddpspawn.torch as ddpspawn_torch

from . import _common, _packages
from ._strategy_base import SpawnStrategyBase


class DDPSpawnStrategy(SpawnStrategyBase):
    """Lightning's ``DDPStrategy`` with ddpspawn's launcher, group and reducer.

    Takes ``DDPStrategy``'s arguments. ``start_method`` is ``"forkserver"``
    (the default), ``"spawn"`` or ``"fork"`` (notebooks); ``ddp_comm_hook``
    torch's built-in hooks run as ddpspawn's (``ddp_comm_state`` a
    ``PowerSGDState`` for PowerSGD), others (and ``ddp_comm_wrapper``) as hooks
    written in Python, on CPU too. DDP options as keywords: ``find_unused_parameters``,
    ``gradient_as_bucket_view``, ``bucket_cap_mb``, ``broadcast_buffers``.
    Anything else is refused here, before any rank starts. ``package`` is
    ``"lightning.pytorch"`` or ``"pytorch_lightning"``: the Trainer's package,
    by default the one the program imported.
    """

    WHAT = "DDPSpawnStrategy"
    PACKAGES = _packages.TRAINER_PACKAGES
    strategy_name = "ddpspawn"
    model: Any  # Lightning's property

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
        package: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        kwargs = self._check_arguments(start_method, model_averaging_period, ddp_comm_hook,
                                       ddp_comm_state, ddp_comm_wrapper, kwargs)
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

    # -- the launcher, the group and the model ------------------------------------

    def _make_launcher(self) -> "_DdpspawnLauncher":
        return _DdpspawnLauncher(self, self._start_method)

    def setup_distributed(self) -> None:
        self._lightning.reset_seed()  # type: ignore[misc]
        self.set_world_ranks()
        self._join_group()

    def _setup_model(self, model: torch.nn.Module) -> ddpspawn_torch.DistributedDataParallel:
        return self._wrap(model)

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

    # -- collectives, through ddpspawn's group (barrier and broadcast: the base's) --------

    def reduce(self, tensor: Any, group: Optional[Any] = None,
               reduce_op: Optional[Union[Any, str]] = "mean") -> Any:
        return _common.reduce_through(
            self._ddpspawn_context, tensor, group, reduce_op,
            lambda: super(DDPSpawnStrategy, self).reduce(tensor, group=group, reduce_op=reduce_op))


class _DdpspawnLauncher:
    """Runs the Trainer's function in ddpspawn's ranks and brings rank 0's state back (Lightning's
    ``_Launcher`` interface)."""

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
        lightning = self._strategy._lightning
        fitting = trainer is not None and trainer.state.fn == lightning.trainer_fn.FITTING
        resume_dir = None
        if (fitting and self._last_fit_state is not None and len(args) > self._FIT_CKPT_PATH
                and args[self._FIT_CKPT_PATH] is None):
            # A second fit: it continues from where the last one ended.
            resume_dir = tempfile.mkdtemp(prefix="ddpspawn-lightning-")  # mode 0700
            path = os.path.join(resume_dir, "last_fit.ckpt")
            with open(path, "xb") as file:
                file.write(self._last_fit_state)
            args = args[:self._FIT_CKPT_PATH] + (path,) + args[self._FIT_CKPT_PATH + 1:]
        snapshot = (lightning.global_state_snapshot.capture()
                    if self._start_method != "fork" else None)
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
    if trainer is None:
        return function(*args, **kwargs) if ctx.rank == 0 else None
    strategy = trainer.strategy
    strategy._ddpspawn_context = ctx
    strategy._lightning.set_num_threads_if_needed(num_processes=ctx.world_size)
    results = function(*args, **kwargs)
    return _rank_zero_state(trainer, results) if ctx.rank == 0 else None


def _rank_zero_state(trainer: Any, results: Any) -> Dict[str, Any]:
    """What the launcher takes back: weights, metrics, the best checkpoint's path and, after a
    fit, the optimizers' and schedulers' state."""
    lightning = trainer.strategy._lightning
    move = lightning.move_data_to_device
    callback = trainer.checkpoint_callback
    fitting = trainer.state.fn == lightning.trainer_fn.FITTING
    module = trainer.lightning_module
    to_bytes = _common.to_bytes
    return {
        "results": move(results, "cpu"),
        "trainer_state": trainer.state,
        "best_model_path": getattr(callback, "best_model_path", None) if callback else None,
        "weights": to_bytes(module.state_dict()) if fitting else None,
        "callback_metrics": to_bytes(move(dict(trainer.callback_metrics), "cpu")),
        "logged_metrics": to_bytes(move(dict(trainer.logged_metrics), "cpu")),
        "optimizers": to_bytes([o.state_dict() for o in trainer.optimizers]) if fitting else None,
        "lr_schedulers": to_bytes([c.scheduler.state_dict() for c in trainer.lr_scheduler_configs])
        if fitting else None,
        # Everything a later fit of this Trainer continues from: Lightning's own checkpoint.
        "fit_state": to_bytes(trainer._checkpoint_connector.dump_checkpoint(weights_only=False))
        if fitting else None,
    }


def _recover_in_launcher(trainer: Any, output: Dict[str, Any]) -> None:
    from_bytes = _common.from_bytes
    callback = trainer.checkpoint_callback
    if callback is not None and hasattr(callback, "best_model_path"):
        callback.best_model_path = str(output["best_model_path"])
    module = trainer.lightning_module
    if output["weights"] is not None:
        module.load_state_dict(from_bytes(output["weights"]), strict=False)
    trainer.state = output["trainer_state"]
    trainer._logger_connector._callback_metrics.update(from_bytes(output["callback_metrics"]))
    trainer._logger_connector._logged_metrics.update(from_bytes(output["logged_metrics"]))
    if output["fit_state"] is not None:
        # The loops' progress (current_epoch, global_step), which Lightning's spawn leaves at 0.
        trainer.fit_loop.load_state_dict(from_bytes(output["fit_state"])["loops"]["fit_loop"])
    if output["optimizers"] is None:
        return
    # The optimizers and schedulers over this process's module, with rank 0's state.
    module.trainer = trainer
    init = trainer.strategy._lightning.init_optimizers_and_lr_schedulers
    optimizers, scheduler_configs = init(module)
    for optimizer, state in zip(optimizers, from_bytes(output["optimizers"])):
        optimizer.load_state_dict(state)
    for config, state in zip(scheduler_configs, from_bytes(output["lr_schedulers"])):
        config.scheduler.load_state_dict(state)
    trainer.strategy.optimizers = optimizers
    trainer.strategy.lr_scheduler_configs = scheduler_configs
