"""Lightning on ddpspawn, with one changed argument.

``Trainer(strategy=DDPSpawnStrategy())`` and ``Fabric(strategy=DDPSpawnFabricStrategy())``, or
``strategy="ddpspawn"`` (also ``"ddpspawn_spawn"``, ``"ddpspawn_fork"``,
``"ddpspawn_forkserver"``) for either, once this module is imported. Lightning 2.6 under both
of its names works: ``lightning`` (``lightning.pytorch``, ``lightning.fabric``) and
``pytorch_lightning`` with ``lightning_fabric``. Importing this module imports every installed
one, to register the names in each.

The ranks are started by ddpspawn's launcher (forkserver by default: one fresh interpreter loads
torch and the main script once and forks every rank), or by a cluster's launcher (torchrun,
SLURM), whose job they join. They join ddpspawn's group and have torch.distributed's default
group over the same ranks (Lightning and user code call it). Gradients are averaged by
ddpspawn's reducer (:class:`ddpspawn.torch.DistributedDataParallel`), and the strategies'
``barrier``, ``broadcast`` and ``reduce``/``all_reduce`` go through ddpspawn's collectives.
After a Trainer's ``fit`` the launching process has rank 0's weights, ``callback_metrics``,
``logged_metrics``, ``checkpoint_callback.best_model_path`` (as Lightning's own spawn) and also
the optimizers and learning-rate schedulers with their state; a second ``fit`` continues where
the first ended. ``docs/lightning.md`` says what is refused, each with an error that says so.
Lightning stays optional: ``import ddpspawn`` never imports this module.
"""

from __future__ import annotations

from typing import Any

from . import _packages
from ._fabric import DDPSpawnFabricStrategy
from ._trainer import DDPSpawnStrategy

__all__ = ["DDPSpawnFabricStrategy", "DDPSpawnStrategy"]

# The per-package classes, by the module-level name pickle finds them under in a spawned rank.
_BODIES = {"DDPSpawnStrategy": (DDPSpawnStrategy, _packages.TRAINER_PACKAGES),
           "DDPSpawnFabricStrategy": (DDPSpawnFabricStrategy, _packages.FABRIC_PACKAGES)}
_BY_NAME = {_packages.class_name(prefix, package): (prefix, body, package)
            for prefix, (body, packages) in _BODIES.items() for package in packages.values()}


def __getattr__(name: str) -> Any:
    if name not in _BY_NAME:
        raise AttributeError(f"module 'ddpspawn.lightning' has no attribute {name!r}")
    prefix, body, package = _BY_NAME[name]
    return _packages.strategy_class(prefix, body, package)


def _register_everywhere() -> None:
    for family in _packages.installed_families():
        for prefix, (body, packages) in _BODIES.items():
            package = packages[family]
            registry = _packages.api(package).registry
            if "ddpspawn" not in registry:
                _packages.strategy_class(prefix, body, package).register_strategies(registry)


_register_everywhere()
