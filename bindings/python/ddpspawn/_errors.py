"""Exceptions of the ddpspawn package, the C status codes and the one table
between them."""

from __future__ import annotations

import builtins
from typing import Dict, NoReturn, Optional, Tuple, Type

# Status codes (DDPSPAWN_OK, DDPSPAWN_ERR_*); ``_lib`` re-exports them.
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_WORKER_FAILED = 2
ERR_TIMEOUT = 3
ERR_INTERRUPTED = 4
ERR_UNAVAILABLE = 5
ERR_FAILED_PRECONDITION = 6
ERR_INTERNAL = 7


class DdpspawnError(Exception):
    """Base class of every error that a ddpspawn call reports.

    ``status`` is the C status code (``DDPSPAWN_ERR_*``), or ``None`` for an
    error found on the Python side before calling into the library.
    """

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


class LibraryLoadError(DdpspawnError, ImportError):
    """The C library could not be found or is not the right ABI version."""


class InvalidArgumentError(DdpspawnError, ValueError):
    """A bad argument: ``DDPSPAWN_ERR_INVALID_ARGUMENT`` or a Python-side check."""


class WorkerFailedError(DdpspawnError):
    """A worker process failed, which ended the job.

    Attributes:
        rank: the rank whose failure ended the job (-1 if unknown).
        message: the launcher's description (``ddpspawn_last_error()``).
        traceback_text: what the failing rank reported, e.g. its Python
            traceback; "" if it reported nothing (a crash, ``os._exit``).
        exit_code: the rank's exit code, or None if it did not exit normally.
        signal: the signal that killed the rank, or None.
    """

    def __init__(
        self,
        rank: int,
        message: str,
        traceback_text: str = "",
        exit_code: Optional[int] = None,
        signal: Optional[int] = None,
    ) -> None:
        text = message
        if traceback_text.strip() and traceback_text.strip() not in message:
            text += f"\n\nError reported by rank {rank}:\n{traceback_text.rstrip()}"
        super().__init__(text, status=ERR_WORKER_FAILED)
        self.rank = rank
        self.message = message
        self.traceback_text = traceback_text
        self.exit_code = exit_code
        self.signal = signal

    def __reduce__(  # keep the attributes when pickled
        self,
    ) -> Tuple[Type[WorkerFailedError], Tuple[int, str, str, Optional[int], Optional[int]]]:
        return (
            type(self),
            (self.rank, self.message, self.traceback_text, self.exit_code, self.signal),
        )


class DdpspawnTimeoutError(DdpspawnError, builtins.TimeoutError):
    """The job or a collective ran past its timeout."""


class UnavailableError(DdpspawnError):
    """Valid but not available here (e.g. nccl on a CPU build, not a worker)."""


class FailedPreconditionError(DdpspawnError):
    """A call made in the wrong state."""


class InternalError(DdpspawnError):
    """A system call or a collective failed (peer gone, connection reset ...)."""


# The status of each error type but the two that raise_status treats apart
# (a worker failure, an interrupt); both ways: status -> type, type -> status.
_BY_STATUS: Dict[int, Type[DdpspawnError]] = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    ERR_TIMEOUT: DdpspawnTimeoutError,
    ERR_UNAVAILABLE: UnavailableError,
    ERR_FAILED_PRECONDITION: FailedPreconditionError,
    ERR_INTERNAL: InternalError,
}
_STATUS_OF = {error_type: status for status, error_type in _BY_STATUS.items()}


def status_of(error: BaseException) -> int:
    """The C status that stands for ``error`` (a Python hook's failure told to
    the library): a ddpspawn error's own status, else its type's;
    ``ERR_INTERRUPTED`` for KeyboardInterrupt; ``ERR_INTERNAL`` for the rest."""
    if isinstance(error, KeyboardInterrupt):
        return ERR_INTERRUPTED
    if isinstance(error, DdpspawnError):
        return error.status or _STATUS_OF.get(type(error), ERR_INTERNAL)
    return ERR_INTERNAL


def raise_status(status: int, message: str) -> NoReturn:
    """Raises the exception that matches a non-zero C status code.

    ``DDPSPAWN_ERR_INTERRUPTED`` becomes :class:`KeyboardInterrupt`. A worker
    failure met outside a job (no rank known) becomes a
    :class:`WorkerFailedError` with rank -1; the launcher builds a richer one.
    """
    if status == ERR_INTERRUPTED:
        raise KeyboardInterrupt(message)
    if status == ERR_WORKER_FAILED:
        raise WorkerFailedError(-1, message)
    error_type = _BY_STATUS.get(status, DdpspawnError)
    if error_type is DdpspawnError:
        message = f"{message} (unknown status {status})"
    raise error_type(message, status=status)
