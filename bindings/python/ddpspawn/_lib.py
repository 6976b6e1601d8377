"""Loads libddpspawn once and declares the C ABI of ``ddpspawn.h`` (and
``ddpspawn_dlpack.h``) for ctypes.

Where the library is looked for, in order:

1. ``$DDPSPAWN_LIBRARY`` (a full path; when set, nothing else is tried);
2. ``libddpspawn.so.1`` next to this package;
3. the system's library search path.

Everything else in the package reaches the C functions through :func:`lib`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Type, TypeVar, Union

from ._errors import LibraryLoadError, raise_status

# Status codes (DDPSPAWN_OK, DDPSPAWN_ERR_*): _errors' table, re-exported for the other modules.
from ._errors import ERR_FAILED_PRECONDITION as ERR_FAILED_PRECONDITION
from ._errors import ERR_INTERNAL as ERR_INTERNAL
from ._errors import ERR_INTERRUPTED as ERR_INTERRUPTED
from ._errors import ERR_INVALID_ARGUMENT as ERR_INVALID_ARGUMENT
from ._errors import ERR_TIMEOUT as ERR_TIMEOUT
from ._errors import ERR_UNAVAILABLE as ERR_UNAVAILABLE
from ._errors import ERR_WORKER_FAILED as ERR_WORKER_FAILED
from ._errors import OK as OK

#: The ABI major version these declarations describe (``DDPSPAWN_ABI_VERSION``).
ABI_VERSION = 1
#: File name of the shared library; its SONAME carries the ABI major.
LIBRARY_NAME = f"libddpspawn.so.{ABI_VERSION}"
#: Environment variable that names the library to load.
LIBRARY_ENV = "DDPSPAWN_LIBRARY"


# How a rank ended (DDPSPAWN_RANK_*).
RANK_NOT_STARTED = 0
RANK_RUNNING = 1
RANK_EXITED = 2
RANK_SIGNALED = 3

# Element types (DDPSPAWN_FLOAT32 ...) and reduce operations (DDPSPAWN_SUM ...).
FLOAT32 = 0
FLOAT64 = 1
INT32 = 2
INT64 = 3

SUM = 0
MEAN = 1
MIN = 2
MAX = 3
PRODUCT = 4


class Job(Structure):
    """Opaque ``ddpspawn_job``."""


class ContextHandle(Structure):
    """Opaque ``ddpspawn_context``."""


class ReducerHandle(Structure):
    """Opaque ``ddpspawn_reducer``."""


class RunResultHandle(Structure):
    """Opaque ``ddpspawn_run_result``."""


JobPtr = POINTER(Job)
ContextPtr = POINTER(ContextHandle)
ReducerPtr = POINTER(ReducerHandle)
RunResultPtr = POINTER(RunResultHandle)

#: ``int (*ddpspawn_worker_fn)(int32_t rank, void* user_data)``
WorkerFn = CFUNCTYPE(c_int, c_int32, c_void_p)
#: ``void (*ddpspawn_fork_hook)(void)``
ForkHook = CFUNCTYPE(None)


class LaunchOptions(Structure):
    """``ddpspawn_launch_options``; build it with :func:`launch_options`."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("nprocs", c_int32),
        ("start_method", c_char_p),
        ("argv", POINTER(c_char_p)),
        ("env", POINTER(c_char_p)),
        ("worker_fn", WorkerFn),
        ("user_data", c_void_p),
        ("before_fork", ForkHook),
        ("after_fork_parent", ForkHook),
        ("after_fork_child", ForkHook),
        ("timeout_s", c_double),
        ("grace_period_s", c_double),
        ("master_addr", c_char_p),
        ("master_port", c_int32),
        ("unused0", c_int32),
        ("nnodes", c_int32),
        ("node_rank", c_int32),
        ("max_restarts", c_int32),
        ("unused1", c_int32),
    ]


class RankReport(Structure):
    """``ddpspawn_rank_report``; build it with :func:`rank_report`."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("state", c_int32),
        ("exit_code", c_int32),
        ("signal", c_int32),
        ("pid", c_int64),
        ("stopped_by_launcher", c_int32),
    ]


class ContextOptions(Structure):
    """``ddpspawn_context_options``; build it with :func:`context_options`."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("backend", c_char_p),
        ("timeout_s", c_double),
    ]


class BucketStruct(Structure):
    """``ddpspawn_bucket``: one bucket, as a communication hook sees it."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("index", c_int32),
        ("bucket_count", c_int32),
        ("dtype", c_int32),
        ("data", c_void_p),
        ("count", c_size_t),
    ]


#: ``ddpspawn_status (*start)(void*, ddpspawn_context*, const ddpspawn_bucket*, void**)``
CommHookStart = CFUNCTYPE(
    c_int32, c_void_p, POINTER(ContextHandle), POINTER(BucketStruct), POINTER(c_void_p)
)
#: ``ddpspawn_status (*wait)(void*, ddpspawn_context*, void*)``
CommHookWait = CFUNCTYPE(c_int32, c_void_p, POINTER(ContextHandle), c_void_p)
#: ``void (*release)(void*)``
CommHookRelease = CFUNCTYPE(None, c_void_p)


class CommHookTable(Structure):
    """``ddpspawn_comm_hook``: a communication hook's functions."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("user_data", c_void_p),
        ("start", CommHookStart),
        ("wait", CommHookWait),
        ("release", CommHookRelease),
    ]


class ReducerOptions(Structure):
    """``ddpspawn_reducer_options``; build it with :func:`reducer_options`."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("bucket_cap_mb", c_double),
        ("first_bucket_cap_mb", c_double),
        ("comm_hook", c_char_p),
        ("powersgd_rank", c_int32),
        ("powersgd_start_iteration", c_int32),
        ("find_unused_parameters", c_int32),
    ]


class ReducerOptionsWithHook(ReducerOptions):
    """``ddpspawn_reducer_options`` with ``custom_comm_hook``, the field a later
    ABI minor added: used only for a hook written in Python, so that a reducer
    without one still works with a library that predates the field."""

    _fields_ = [("custom_comm_hook", POINTER(CommHookTable))]


_StructT = TypeVar("_StructT", bound=Structure)


# Defaults come from the library (ddpspawn_*_init_sized, libgit2's *_init(opts, version)), never
# copied here: we pass the size of the struct we allocated, so a newer library writes only the
# fields we know and never past the struct's end.
def _initialized(struct_type: Type[_StructT], init_name: str) -> _StructT:
    value = struct_type()
    check(getattr(lib(), init_name)(ctypes.byref(value), ctypes.sizeof(struct_type)))
    return value


def launch_options() -> LaunchOptions:
    """A ``ddpspawn_launch_options`` with the library's defaults."""
    return _initialized(LaunchOptions, "ddpspawn_launch_options_init_sized")


def rank_report() -> RankReport:
    """A ``ddpspawn_rank_report`` with the library's defaults."""
    return _initialized(RankReport, "ddpspawn_rank_report_init_sized")


def context_options() -> ContextOptions:
    """A ``ddpspawn_context_options`` with the library's defaults."""
    return _initialized(ContextOptions, "ddpspawn_context_options_init_sized")


def reducer_options() -> ReducerOptions:
    """A ``ddpspawn_reducer_options`` with the library's defaults."""
    return _initialized(ReducerOptions, "ddpspawn_reducer_options_init_sized")


def reducer_options_with_hook() -> ReducerOptionsWithHook:
    """The same, with ``custom_comm_hook`` (NULL)."""
    return _initialized(ReducerOptionsWithHook, "ddpspawn_reducer_options_init_sized")


_Status = c_int32

if TYPE_CHECKING:  # pragma: no cover
    import _ctypes

    # For the type checker only (ctypes' generics are not subscriptable at run time): a restype or
    # argtype of SIGNATURES, and a C function pointer (a function of a CDLL, or a callback made
    # with WorkerFn or ForkHook).
    _CType = Union[Type[ctypes._SimpleCData[Any]], Type[ctypes._Pointer[Any]]]
    FunctionPointer = _ctypes.CFuncPtr

#: name -> (restype, argtypes) for every function in ddpspawn.h.
SIGNATURES: Dict[str, Tuple[Optional[_CType], List[_CType]]] = {
    # Status codes and errors.
    "ddpspawn_last_error": (c_char_p, []),
    "ddpspawn_set_last_error": (c_int32, [c_int32, c_char_p]),
    "ddpspawn_abi_version": (c_int32, []),
    "ddpspawn_version": (c_char_p, []),
    "ddpspawn_build_info": (c_char_p, []),
    "ddpspawn_free": (None, [c_void_p]),
    # Launcher.
    "ddpspawn_launch_options_init": (None, [POINTER(LaunchOptions)]),
    "ddpspawn_job_create": (_Status, [POINTER(LaunchOptions), POINTER(JobPtr)]),
    "ddpspawn_job_destroy": (None, [JobPtr]),
    "ddpspawn_job_start": (_Status, [JobPtr]),
    "ddpspawn_job_wait": (_Status, [JobPtr]),
    "ddpspawn_job_run": (_Status, [JobPtr]),
    "ddpspawn_job_nprocs": (c_int32, [JobPtr]),
    "ddpspawn_job_restarts": (c_int32, [JobPtr]),
    "ddpspawn_job_rank_report": (_Status, [JobPtr, c_int32, POINTER(RankReport)]),
    "ddpspawn_launch_options_init_sized": (_Status, [POINTER(LaunchOptions), c_uint32]),
    "ddpspawn_rank_report_init_sized": (_Status, [POINTER(RankReport), c_uint32]),
    "ddpspawn_context_options_init_sized": (_Status, [POINTER(ContextOptions), c_uint32]),
    "ddpspawn_reducer_options_init_sized": (_Status, [POINTER(ReducerOptions), c_uint32]),
    "ddpspawn_job_failed_rank": (c_int32, [JobPtr]),
    "ddpspawn_job_rank_error": (_Status, [JobPtr, c_int32, POINTER(c_char_p)]),
    "ddpspawn_job_result": (
        _Status,
        [JobPtr, POINTER(c_void_p), POINTER(c_size_t), POINTER(c_int32)],
    ),
    # Inside a worker.
    "ddpspawn_serve_forks_if_forkserver": (c_int32, []),
    "ddpspawn_is_worker": (c_int32, []),
    "ddpspawn_worker_set_result": (_Status, [c_void_p, c_size_t]),
    "ddpspawn_worker_set_error": (_Status, [c_char_p]),
    "ddpspawn_context_options_init": (None, [POINTER(ContextOptions)]),
    "ddpspawn_context_create": (
        _Status,
        [POINTER(ContextOptions), POINTER(ContextPtr)],
    ),
    "ddpspawn_context_destroy": (None, [ContextPtr]),
    "ddpspawn_context_rank": (c_int32, [ContextPtr]),
    "ddpspawn_context_world_size": (c_int32, [ContextPtr]),
    "ddpspawn_context_local_rank": (c_int32, [ContextPtr]),
    "ddpspawn_context_local_world_size": (c_int32, [ContextPtr]),
    "ddpspawn_context_node_rank": (c_int32, [ContextPtr]),
    "ddpspawn_context_environment": (c_char_p, [ContextPtr]),
    "ddpspawn_context_straggler": (
        _Status,
        [ContextPtr, POINTER(c_int32), POINTER(c_int64), POINTER(c_int32), POINTER(c_char_p)],
    ),
    "ddpspawn_context_rank_arrivals": (
        _Status,
        [ContextPtr, c_int32, POINTER(c_int64), POINTER(c_double), POINTER(c_double)],
    ),
    # Collectives.
    "ddpspawn_barrier": (_Status, [ContextPtr, c_char_p]),
    "ddpspawn_broadcast": (
        _Status,
        [ContextPtr, c_void_p, c_size_t, c_int32, c_int32],
    ),
    "ddpspawn_broadcast_bytes": (
        _Status,
        [ContextPtr, c_void_p, c_size_t, c_int32, POINTER(c_void_p), POINTER(c_size_t)],
    ),
    "ddpspawn_all_reduce": (
        _Status,
        [ContextPtr, c_void_p, c_size_t, c_int32, c_int32],
    ),
    "ddpspawn_reduce": (
        _Status,
        [ContextPtr, c_void_p, c_size_t, c_int32, c_int32, c_int32],
    ),
    "ddpspawn_all_gather": (
        _Status,
        [ContextPtr, c_void_p, c_size_t, c_int32, c_void_p],
    ),
    "ddpspawn_reduce_scatter": (
        _Status,
        [ContextPtr, c_void_p, c_void_p, c_size_t, c_int32, c_int32],
    ),
    "ddpspawn_all_gather_bytes": (
        _Status,
        [ContextPtr, c_void_p, c_size_t, POINTER(c_void_p), POINTER(c_size_t)],
    ),
    # Collectives on DLPack tensors (ddpspawn_dlpack.h): a DLTensor* as c_void_p.
    "ddpspawn_all_reduce_dlpack": (_Status, [ContextPtr, c_void_p, c_int32]),
    "ddpspawn_reduce_dlpack": (_Status, [ContextPtr, c_void_p, c_int32, c_int32]),
    "ddpspawn_broadcast_dlpack": (_Status, [ContextPtr, c_void_p, c_int32]),
    "ddpspawn_all_gather_dlpack": (_Status, [ContextPtr, c_void_p, c_void_p]),
    "ddpspawn_reduce_scatter_dlpack": (_Status, [ContextPtr, c_void_p, c_void_p, c_int32]),
    # Checkpoints of named DLPack tensors (DDPSPAWN_1.3): names and DLTensor* arrays.
    "ddpspawn_checkpoint_save_dlpack": (
        _Status,
        [ContextPtr, c_char_p, POINTER(c_char_p), POINTER(c_void_p), c_size_t, c_int64],
    ),
    "ddpspawn_checkpoint_load_dlpack": (
        _Status,
        [c_char_p, POINTER(c_char_p), POINTER(c_void_p), c_size_t, POINTER(c_int64)],
    ),
    # Gradient clipping for a loop of one's own (DDPSPAWN_1.4): DLTensor* arrays.
    "ddpspawn_clip_grad_norm_dlpack": (
        _Status,
        [POINTER(c_char_p), POINTER(c_void_p), c_size_t, c_double, c_double, POINTER(c_double)],
    ),
    "ddpspawn_clip_grad_value_dlpack": (_Status, [POINTER(c_void_p), c_size_t, c_double]),
    # Metrics for a loop of one's own (DDPSPAWN_1.3).
    "ddpspawn_log_metrics": (
        _Status,
        [ContextPtr, c_char_p, c_int64, c_int64, POINTER(c_char_p), POINTER(c_double), c_size_t],
    ),
    # Sharding a dataset (DDPSPAWN_1.2).
    "ddpspawn_distributed_sampler_indices": (
        _Status,
        [
            c_int64,
            c_int32,
            c_int32,
            c_int32,
            c_uint64,
            c_int32,
            c_int64,
            POINTER(c_int64),
            c_size_t,
            POINTER(c_size_t),
        ],
    ),
    # Gradient reducer.
    "ddpspawn_reducer_options_init": (None, [POINTER(ReducerOptions)]),
    "ddpspawn_reducer_create": (
        _Status,
        [
            ContextPtr,
            POINTER(c_void_p),
            POINTER(c_size_t),
            POINTER(c_int32),
            c_size_t,
            POINTER(ReducerOptions),
            POINTER(ReducerPtr),
        ],
    ),
    "ddpspawn_reducer_destroy": (None, [ReducerPtr]),
    "ddpspawn_reducer_mark_ready": (_Status, [ReducerPtr, c_size_t]),
    "ddpspawn_reducer_finalize": (_Status, [ReducerPtr]),
    "ddpspawn_reducer_set_sync": (_Status, [ReducerPtr, c_int32]),
    "ddpspawn_reducer_bucket_count": (c_int32, [ReducerPtr]),
    "ddpspawn_reducer_written": (_Status, [ReducerPtr, c_size_t, POINTER(c_int32)]),
    "ddpspawn_reducer_compression": (
        _Status,
        [ReducerPtr, POINTER(c_int64), POINTER(c_int64)],
    ),
    "ddpspawn_reducer_create_dlpack": (
        _Status,
        [ContextPtr, POINTER(c_void_p), c_size_t, POINTER(ReducerOptions), POINTER(ReducerPtr)],
    ),
    "ddpspawn_reducer_buffers_in_buckets_dlpack": (
        _Status,
        [ReducerPtr, POINTER(c_void_p), c_size_t],
    ),
    # Training runs.
    "ddpspawn_run": (
        _Status,
        [c_char_p, POINTER(c_char_p), POINTER(RunResultPtr)],
    ),
    "ddpspawn_run_result_destroy": (None, [RunResultPtr]),
    "ddpspawn_run_result_get": (c_char_p, [RunResultPtr, c_char_p]),
    "ddpspawn_run_result_text": (c_char_p, [RunResultPtr]),
    "ddpspawn_run_result_count": (c_size_t, [RunResultPtr]),
    "ddpspawn_run_result_key": (c_char_p, [RunResultPtr, c_size_t]),
    "ddpspawn_run_result_value": (c_char_p, [RunResultPtr, c_size_t]),
    "ddpspawn_run_failed_rank": (c_int32, []),
    "ddpspawn_run_nprocs": (c_int32, []),
    "ddpspawn_run_rank_report": (_Status, [c_int32, POINTER(RankReport)]),
    "ddpspawn_run_rank_error": (_Status, [c_int32, POINTER(c_char_p)]),
}

_lock = threading.RLock()
_cdll: Optional[ctypes.CDLL] = None
_path: Optional[str] = None
_pydll_job_start: Optional[FunctionPointer] = None


def _candidates() -> list[str]:
    """Where to look for the library, in order (see the module docstring)."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        return [override]  # the caller asked for this file: nothing else
    candidates = [str(Path(__file__).resolve().parent / LIBRARY_NAME)]
    found = ctypes.util.find_library("ddpspawn")
    if found:
        candidates.append(found)
    candidates.append(LIBRARY_NAME)  # the dynamic loader's own search path
    return candidates


def _declare(cdll: ctypes.CDLL) -> None:
    """Sets restype and argtypes on every function of the header."""
    for name, (restype, argtypes) in SIGNATURES.items():
        function = getattr(cdll, name)
        function.restype = restype
        function.argtypes = argtypes


def _load() -> tuple[ctypes.CDLL, str]:
    attempts = []
    for candidate in _candidates():
        is_path = os.sep in candidate
        if is_path and not os.path.exists(candidate):
            attempts.append(f"  {candidate}: no such file")
            continue
        try:
            cdll = ctypes.CDLL(candidate)
        except OSError as error:
            attempts.append(f"  {candidate}: {error}")
            continue
        try:
            _declare(cdll)
        except AttributeError as error:
            raise LibraryLoadError(
                f"{candidate} is not a usable libddpspawn: {error}"
            ) from error
        version = cdll.ddpspawn_abi_version()
        if version != ABI_VERSION:
            raise LibraryLoadError(
                f"{candidate} has ABI version {version}; this package needs "
                f"{ABI_VERSION}"
            )
        return cdll, os.path.abspath(candidate) if is_path else candidate
    where = f" (from ${LIBRARY_ENV})" if os.environ.get(LIBRARY_ENV) else ""
    raise LibraryLoadError(
        f"could not load the ddpspawn C library{where}. Looked at:\n"
        + "\n".join(attempts)
        + f"\nSet {LIBRARY_ENV} to the full path of {LIBRARY_NAME}, put it next "
        "to the ddpspawn package, or install it on the system library path."
    )


def lib() -> ctypes.CDLL:
    """The loaded library (a ``CDLL``: calls release the GIL). Loads it once."""
    global _cdll, _path
    if _cdll is None:
        with _lock:
            if _cdll is None:
                _cdll, _path = _load()
    return _cdll


def library_path() -> str:
    """The path (or, when found on the search path, the name) that was loaded."""
    lib()
    assert _path is not None
    return _path


def gil_holding_job_start() -> FunctionPointer:
    """``ddpspawn_job_start`` called with the GIL held (``PyDLL`` semantics).

    Fork mode needs this: CPython's fork hooks and the worker callback run
    inside the call and must find the GIL held by this thread. The same
    library is opened a second time as a ``PyDLL`` for this one function.
    """
    global _pydll_job_start
    if _pydll_job_start is None:
        path = library_path()
        with _lock:
            if _pydll_job_start is None:
                function = ctypes.PyDLL(path).ddpspawn_job_start
                restype, argtypes = SIGNATURES["ddpspawn_job_start"]
                function.restype, function.argtypes = restype, argtypes
                _pydll_job_start = function
    return _pydll_job_start


def last_error() -> str:
    """``ddpspawn_last_error()`` for this thread, decoded."""
    message: bytes = lib().ddpspawn_last_error()  # never NULL
    return message.decode("utf-8", "replace")


def check(status: int) -> None:
    """Raises the matching exception, with ``ddpspawn_last_error()``, unless OK."""
    if status != OK:
        raise_status(status, last_error())
