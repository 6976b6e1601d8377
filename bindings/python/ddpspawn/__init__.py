"""ddpspawn: start data-parallel worker processes and run collectives.

A pure-Python (ctypes) binding of libddpspawn's C ABI. See :func:`spawn` to
launch workers, :class:`Context` for what a worker can do,
:class:`Reducer` (from :meth:`Context.reducer`) to average gradients DDP-style,
and :func:`fit`, :func:`validate`, :func:`test` and :func:`predict` for
training runs that the library carries out in C++ (LibTorch).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict

from . import _lib
from ._arrivals import RankArrivals, StragglerReport
from ._checkpoint import load_checkpoint
from ._comm_hook import Bucket, CCommHook
from ._context import Context
from ._errors import (
    DdpspawnError,
    DdpspawnTimeoutError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    LibraryLoadError,
    UnavailableError,
    WorkerFailedError,
)
from ._launch import spawn
from ._reducer import Reducer
from ._sampler import distributed_sampler_indices
from ._train import FitResult, export, fit, predict, test, validate

__version__ = "0.1.0"

__all__ = [
    "Bucket",
    "CCommHook",
    "Context",
    "DdpspawnError",
    "DdpspawnTimeoutError",
    "FailedPreconditionError",
    "FitResult",
    "InternalError",
    "InvalidArgumentError",
    "LibraryLoadError",
    "RankArrivals",
    "Reducer",
    "StragglerReport",
    "UnavailableError",
    "WorkerFailedError",
    "abi_version",
    "build_info",
    "distributed_sampler_indices",
    "export",
    "fit",
    "is_worker",
    "library_path",
    "library_version",
    "load_checkpoint",
    "predict",
    "spawn",
    "test",
    "validate",
]


def abi_version() -> int:
    """``ddpspawn_abi_version()`` of the loaded library."""
    return int(_lib.lib().ddpspawn_abi_version())


def library_version() -> str:
    """``ddpspawn_version()`` of the loaded library, e.g. "0.1.0"."""
    version: bytes = _lib.lib().ddpspawn_version()  # never NULL
    return version.decode()


def build_info() -> Dict[str, str]:
    """``ddpspawn_build_info()`` as a dict: version, torch, cuda, nccl, backends."""
    info: bytes = _lib.lib().ddpspawn_build_info()  # never NULL
    text = info.decode()
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def library_path() -> str:
    """Where the loaded library came from (a path, or a name the loader found)."""
    return _lib.library_path()


def __getattr__(name: str) -> ModuleType:
    """``ddpspawn.torch`` on first access: it imports torch, which ``import ddpspawn`` does not."""
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_worker() -> bool:
    """True in a process that a ddpspawn launcher started."""
    return bool(_lib.lib().ddpspawn_is_worker())


# Show public classes as ddpspawn.X (in reprs, tracebacks and pickles).
for _public in (
    Context,
    DdpspawnError,
    DdpspawnTimeoutError,
    FailedPreconditionError,
    FitResult,
    InternalError,
    InvalidArgumentError,
    LibraryLoadError,
    Reducer,
    UnavailableError,
    WorkerFailedError,
):
    _public.__module__ = __name__
del _public
