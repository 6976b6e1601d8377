"""One rank's life inside a worker: join the group, run fn, report the outcome.

Shared by both start methods: the fork-mode callback and the spawn-mode
entry point (``python -m ddpspawn._worker``) end up in :func:`run_rank`.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import sys
import traceback
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

from . import _lib, _torch_distributed
from ._context import Context

if TYPE_CHECKING:  # pragma: no cover
    from ._lib import FunctionPointer


def flush_std_streams() -> None:
    """Flushes stdout and stderr; the worker may end with ``_exit``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def report_exception() -> int:
    """Records the exception being handled as this rank's error; returns 1.

    A ``SystemExit`` is not an error: its code becomes the exit code.
    """
    error = sys.exc_info()[1]
    if isinstance(error, SystemExit):
        if error.code is None or isinstance(error.code, int):
            return error.code or 0
        text = f"SystemExit: {error.code}"
    else:
        text = traceback.format_exc()
    try:
        _lib.lib().ddpspawn_worker_set_error(text.encode("utf-8", "replace"))
    except Exception:
        # Without the library there is no channel: the launcher will at least
        # see the exit code, and stderr gets the text.
        sys.stderr.write(text)
    return 1


def _set_result(value: Any) -> None:
    data = pickle.dumps(value)
    _lib.check(_lib.lib().ddpspawn_worker_set_result(data, len(data)))


def run_rank(
    fn: Callable[..., Any],
    args: Sequence[Any],
    backend: str,
    timeout: Optional[float] = None,
) -> int:
    """Runs ``fn(ctx, *args)`` in a fresh :class:`Context`; returns the exit code.

    A torch.distributed default group that fn asked for
    (:func:`ddpspawn.torch.init_process_group`) is destroyed when fn returns.

    Rank 0's return value is pickled and handed to the launcher. Any
    exception is reported with its traceback and gives exit code 1.
    """
    try:
        with Context(backend=backend, timeout=timeout) as ctx:
            try:
                value = fn(ctx, *args)
            except BaseException:
                # Reported before the group closes: the peers that this rank's
                # leaving fails report after it, so the launcher names it.
                return report_exception()
            finally:
                _torch_distributed.shutdown_if_made()
            if ctx.rank == 0:
                _set_result(value)
        return 0
    except BaseException:
        return report_exception()
    finally:
        flush_std_streams()


def worker_callback(
    fn: Callable[..., Any], args: Sequence[Any], backend: str
) -> FunctionPointer:
    """A ``ddpspawn_worker_fn`` that runs :func:`run_rank` in a forked child."""

    def callback(rank: int, user_data: Optional[int]) -> int:
        try:
            _sync_environ()
            return run_rank(fn, args, backend)
        except BaseException:
            code = report_exception()
            flush_std_streams()
            return code

    return _lib.WorkerFn(callback)


def _sync_environ() -> None:
    """Makes ``os.environ`` match the C environment.

    In fork mode the launcher hands the child its environment (RANK,
    WORLD_SIZE ...) at the C level after the fork; ``os.environ`` is a
    snapshot taken at interpreter start and would not show it.
    """
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    current: Dict[bytes, bytes] = {}
    index = 0
    while environ[index] is not None:
        name, sep, value = environ[index].partition(b"=")
        if sep:
            current[name] = value
        index += 1
    # Assign only after reading: assigning calls putenv, which may move environ.
    for name in set(os.environb) - set(current):
        del os.environb[name]
    for name, value in current.items():
        if os.environb.get(name) != value:
            os.environb[name] = value
