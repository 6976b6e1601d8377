"""Which Lightning a strategy is made for, and the pieces of it the strategies use.

Lightning 2.6 ships under two names with the same API and separate classes: the
unified package ``lightning`` (``lightning.pytorch``, ``lightning.fabric``) and
the standalone ``pytorch_lightning`` with ``lightning_fabric``. A Trainer
accepts only strategies of its own package, so each strategy class here is made
once per package (:func:`strategy_class`), and the public classes pick the
package their user imported (:func:`choose`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

from .._errors import InvalidArgumentError

# The Trainer's and Fabric's module in each family; a family is one installed distribution.
TRAINER_PACKAGES = {"lightning": "lightning.pytorch", "standalone": "pytorch_lightning"}
FABRIC_PACKAGES = {"lightning": "lightning.fabric", "standalone": "lightning_fabric"}
_FAMILY_MODULES = {"lightning": ("lightning",), "standalone": ("pytorch_lightning",
                                                               "lightning_fabric")}


def _imported_families() -> FrozenSet[str]:
    return frozenset(family for family, modules in _FAMILY_MODULES.items()
                     if any(module in sys.modules for module in modules))


def installed_families() -> Tuple[str, ...]:
    return tuple(family for family, modules in _FAMILY_MODULES.items()
                 if importlib.util.find_spec(modules[0]) is not None)


# The families the program had imported before it imported ddpspawn.lightning (which then imports
# every installed one, to register its strategy names).
USER_FAMILIES = _imported_families()


def choose(packages: Dict[str, str], package: Optional[str], what: str) -> str:
    """The module name, of `packages`, that a strategy is made for: `package` if given, else the
    one Lightning the program imported (or the one installed). Refuses to guess between two."""
    names = tuple(packages.values())
    if package is not None:
        if package not in names:
            raise InvalidArgumentError(
                f"{what}: package {package!r} is not one of {', '.join(map(repr, names))}")
        return package
    families = USER_FAMILIES or frozenset(installed_families())
    if len(families) == 1:
        return packages[next(iter(families))]
    if not families:
        raise InvalidArgumentError(
            f"{what} needs Lightning 2.6: pip install 'lightning==2.6.*' (or "
            "'pytorch-lightning==2.6.*')")
    raise InvalidArgumentError(
        f"{what}: both Lightning packages are {'imported' if USER_FAMILIES else 'installed'}, and "
        f"a strategy works with one of them only; pass package={names[0]!r} or {names[1]!r}")


@dataclass(frozen=True)
class Api:
    """One package's pieces that the strategies use (its classes, as Any: they differ per
    package)."""

    package: str
    ddp_strategy: Any
    registry: Any
    move_data_to_device: Callable[..., Any]
    set_num_threads_if_needed: Callable[..., None]
    global_state_snapshot: Any
    init_dist_connection: Callable[..., None]
    # The Trainer's only (None for Fabric).
    trainer_fn: Any = None
    init_optimizers_and_lr_schedulers: Optional[Callable[..., Any]] = None
    reset_seed: Optional[Callable[[], None]] = None
    # Fabric's only (None for the Trainer).
    backward_sync_control: Any = None
    do_nothing: Any = None


def _fabric_utilities(fabric: str) -> Dict[str, Any]:
    distributed = importlib.import_module(f"{fabric}.utilities.distributed")
    launchers = importlib.import_module(f"{fabric}.strategies.launchers.multiprocessing")
    return {
        "move_data_to_device": importlib.import_module(f"{fabric}.utilities").move_data_to_device,
        "set_num_threads_if_needed": distributed._set_num_threads_if_needed,
        "init_dist_connection": distributed._init_dist_connection,
        "global_state_snapshot": launchers._GlobalStateSnapshot,
    }


_apis: Dict[str, Api] = {}


def api(package: str) -> Api:
    """The pieces of `package` (a value of TRAINER_PACKAGES or FABRIC_PACKAGES), imported once."""
    if package in _apis:
        return _apis[package]
    try:
        if package in TRAINER_PACKAGES.values():
            family = next(f for f, name in TRAINER_PACKAGES.items() if name == package)
            strategies = importlib.import_module(f"{package}.strategies")
            made = Api(
                package=package,
                ddp_strategy=strategies.DDPStrategy,
                registry=strategies.StrategyRegistry,
                trainer_fn=importlib.import_module(f"{package}.trainer.states").TrainerFn,
                init_optimizers_and_lr_schedulers=importlib.import_module(
                    f"{package}.core.optimizer")._init_optimizers_and_lr_schedulers,
                reset_seed=importlib.import_module(
                    f"{FABRIC_PACKAGES[family]}.utilities.seed").reset_seed,
                **_fabric_utilities(FABRIC_PACKAGES[family]),
            )
        else:
            strategies = importlib.import_module(f"{package}.strategies")
            fabric = importlib.import_module(f"{package}.fabric")
            made = Api(
                package=package,
                ddp_strategy=strategies.DDPStrategy,
                registry=strategies.STRATEGY_REGISTRY,
                backward_sync_control=importlib.import_module(
                    f"{package}.strategies.strategy")._BackwardSyncControl,
                do_nothing=fabric._do_nothing,
                **_fabric_utilities(package),
            )
    except ImportError as error:
        raise ImportError(
            f"ddpspawn.lightning needs Lightning 2.6's {package}: pip install 'lightning==2.6.*' "
            "(or 'pytorch-lightning==2.6.*')") from error
    _apis[package] = made
    return made


def class_name(prefix: str, package: str) -> str:
    """The module-level name of `prefix`'s class for `package` (pickle finds it by this name)."""
    return f"_{prefix}_{package.replace('.', '__')}"  # lightning.fabric is not lightning_fabric


_classes: Dict[str, Any] = {}


def strategy_class(prefix: str, body: type, package: str) -> Any:
    """`body` (a strategy's package-independent methods) over `package`'s DDPStrategy, made once,
    named class_name(prefix, package) in ddpspawn.lightning."""
    name = class_name(prefix, package)
    if name not in _classes:
        pieces = api(package)
        _classes[name] = type(name, (body, pieces.ddp_strategy), {
            "_lightning": pieces, "__module__": "ddpspawn.lightning", "__qualname__": name})
    return _classes[name]
