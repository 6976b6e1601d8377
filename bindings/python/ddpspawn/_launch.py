"""``spawn()``: start N worker processes through the C launcher and join them."""

from __future__ import annotations

import ctypes
import io
import os
import pickle
import signal as signal_module
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _lib, _payload, _run
from ._errors import (
    DdpspawnError,
    InvalidArgumentError,
    WorkerFailedError,
    raise_status,
)

if TYPE_CHECKING:  # pragma: no cover
    from ._lib import FunctionPointer

START_METHODS = ("spawn", "fork", "forkserver")
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# The forkserver's program (``python -c``): argv[1] is where ddpspawn is,
# argv[2] the library the launcher loaded ("" for the default search), argv[3]
# what it loads before it serves.
_SERVER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from ddpspawn import _worker; sys.exit(_worker.serve(sys.argv[2], sys.argv[3]))"
)


def _check_arguments(
    fn: Callable[..., Any],
    nprocs: int,
    start_method: str,
    timeout: Optional[float],
    grace_period: Optional[float],
    backend: str,
    env: Optional[Mapping[str, str]],
) -> None:
    if not callable(fn):
        raise InvalidArgumentError(f"fn must be callable, not {fn!r}")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise InvalidArgumentError(f"nprocs must be an int >= 1, not {nprocs!r}")
    if start_method not in START_METHODS:
        raise InvalidArgumentError(
            f"unknown start_method {start_method!r}; expected 'spawn', 'fork' or 'forkserver'"
        )
    if timeout is not None and not timeout > 0:
        raise InvalidArgumentError(f"timeout must be positive or None, not {timeout!r}")
    if grace_period is not None and not grace_period >= 0:
        raise InvalidArgumentError(f"grace_period must be >= 0, not {grace_period!r}")
    if not isinstance(backend, str) or not backend:
        raise InvalidArgumentError(f"backend must be a non-empty str, not {backend!r}")
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not name or "=" in name:
            raise InvalidArgumentError(f"bad environment variable name {name!r}")
        if not isinstance(value, str):
            raise InvalidArgumentError(f"environment variable {name} must be a str")


def _worker_env(start_method: str, env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The variables every rank gets on top of the launcher's environment."""
    entries = dict(env or {})
    if start_method in ("spawn", "forkserver"):
        # The fresh interpreter must import ddpspawn before it reads the
        # payload, and must load the very library the launcher loaded (a
        # forkserver's ranks have done so; their own children may not).
        inherited = entries.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        entries["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, inherited) if p)
        library = _lib.library_path()
        if os.sep in library:
            entries[_lib.LIBRARY_ENV] = library
    return entries


def _c_strings(items: Sequence[str]) -> ctypes.Array[ctypes.c_char_p]:
    """A NULL-terminated ``const char* const*`` array."""
    return (ctypes.c_char_p * (len(items) + 1))(*[os.fsencode(i) for i in items], None)


def _fork_hook(name: str) -> FunctionPointer:
    """CPython's own ``PyOS_*Fork*`` function as a ``ddpspawn_fork_hook``."""
    return ctypes.cast(getattr(ctypes.pythonapi, name), _lib.ForkHook)


class _ResultUnpickler(pickle.Unpickler):
    """Reads rank 0's result; what spawn-mode workers call ``__mp_main__`` is
    this process's ``__main__``."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__mp_main__":
            module = "__main__"
        return super().find_class(module, name)


def _signal_name(number: int) -> str:
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _worker_failed(job: ctypes._Pointer[_lib.Job], message: str) -> WorkerFailedError:
    """A WorkerFailedError with the failing rank, its report and its text."""
    lib = _lib.lib()
    rank = lib.ddpspawn_job_failed_rank(job)
    text = ""
    exit_code = signal = None
    if rank >= 0:
        raw = ctypes.c_char_p()
        if lib.ddpspawn_job_rank_error(job, rank, ctypes.byref(raw)) == _lib.OK:
            text = (raw.value or b"").decode("utf-8", "replace")
        report = _lib.rank_report()
        if lib.ddpspawn_job_rank_report(job, rank, ctypes.byref(report)) == _lib.OK:
            if report.state == _lib.RANK_EXITED:
                exit_code = report.exit_code
            elif report.state == _lib.RANK_SIGNALED:
                signal = report.signal
                name = _signal_name(signal)
                if name not in message:
                    message = f"{message} ({name})"
    return WorkerFailedError(rank, message, text, exit_code=exit_code, signal=signal)


def _job_result(job: ctypes._Pointer[_lib.Job]) -> Any:
    data = ctypes.c_void_p()
    size = ctypes.c_size_t()
    has_result = ctypes.c_int32()
    _lib.check(
        _lib.lib().ddpspawn_job_result(
            job, ctypes.byref(data), ctypes.byref(size), ctypes.byref(has_result)
        )
    )
    if not has_result.value:
        return None
    raw = ctypes.string_at(data, size.value) if size.value else b""
    return _ResultUnpickler(io.BytesIO(raw)).load()


def _configure_spawn(
    options: _lib.LaunchOptions, payload_path: str, keep_alive: List[object]
) -> FunctionPointer:
    """Spawn mode: each rank runs ``python -m ddpspawn._worker PAYLOAD``.

    Returns the ``ddpspawn_job_start`` to call (GIL released: the library
    only forks and execs).
    """
    if not sys.executable:
        raise InvalidArgumentError("start_method='spawn' needs sys.executable, which is unset")
    argv = _c_strings([sys.executable, "-m", "ddpspawn._worker", payload_path])
    options.argv = ctypes.cast(argv, ctypes.POINTER(ctypes.c_char_p))
    keep_alive.append(argv)
    return _lib.lib().ddpspawn_job_start


def _configure_forkserver(
    options: _lib.LaunchOptions, payload_path: str, keep_alive: List[object]
) -> Tuple[FunctionPointer, Dict[str, str]]:
    """Forkserver mode: one interpreter (the server) imports ddpspawn, loads
    the library and this process's main script once, then forks each rank,
    which runs the payload named in its environment
    (:func:`ddpspawn._worker.serve`). The server's command line names no
    payload, so later calls of this process share it.

    Returns the ``ddpspawn_job_start`` to call (GIL released, as for spawn) and
    the variables each rank gets.
    """
    if not sys.executable:
        raise InvalidArgumentError("start_method='forkserver' needs sys.executable, which is unset")
    library = _lib.library_path()
    argv = _c_strings([
        sys.executable,
        "-c",
        _SERVER_CODE,
        _PACKAGE_PARENT,
        library if os.sep in library else "",
        _payload.server_preload(),
    ])
    options.argv = ctypes.cast(argv, ctypes.POINTER(ctypes.c_char_p))
    keep_alive.append(argv)
    return _lib.lib().ddpspawn_job_start, {_payload.PAYLOAD_ENV: payload_path}


def _configure_fork(
    options: _lib.LaunchOptions,
    fn: Callable[..., Any],
    args: Sequence[Any],
    backend: str,
    keep_alive: List[object],
) -> FunctionPointer:
    """Fork mode: each forked child runs fn through a ctypes callback.

    CPython's own fork hooks keep the interpreter consistent across the
    fork; they and the callback need the GIL, so the returned
    ``ddpspawn_job_start`` keeps it held during the call.
    """
    callback = _run.worker_callback(fn, tuple(args), backend)
    keep_alive.append(callback)
    options.worker_fn = callback
    options.before_fork = _fork_hook("PyOS_BeforeFork")
    options.after_fork_parent = _fork_hook("PyOS_AfterFork_Parent")
    options.after_fork_child = _fork_hook("PyOS_AfterFork_Child")
    return _lib.gil_holding_job_start()


def _run_job(options: _lib.LaunchOptions, start: FunctionPointer) -> Any:
    """Creates, starts and waits for the job; returns rank 0's result."""
    lib = _lib.lib()
    job = _lib.JobPtr()
    _lib.check(lib.ddpspawn_job_create(ctypes.byref(options), ctypes.byref(job)))
    try:
        launcher_pid = os.getpid()
        status = start(job)
        if os.getpid() != launcher_pid:  # a forked child must never get here
            os._exit(70)
        _lib.check(status)
        status = lib.ddpspawn_job_wait(job)  # releases the GIL while waiting
        if status == _lib.ERR_WORKER_FAILED:
            raise _worker_failed(job, _lib.last_error())
        if status != _lib.OK:
            raise_status(status, _lib.last_error())
        return _job_result(job)
    finally:
        lib.ddpspawn_job_destroy(job)


def spawn(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    nprocs: int = 1,
    start_method: str = "spawn",
    timeout: Optional[float] = None,
    grace_period: Optional[float] = None,
    backend: str = "gloo",
    env: Optional[Mapping[str, str]] = None,
    nnodes: Optional[int] = None,
    node_rank: Optional[int] = None,
    master_addr: Optional[str] = None,
    master_port: Optional[int] = None,
    max_restarts: int = 0,
) -> Any:
    """Runs ``fn(ctx, *args)`` in ``nprocs`` worker processes and waits for them.

    Each rank first joins the process group as a :class:`ddpspawn.Context`
    ``ctx`` (with ``backend``), then calls fn. Rank 0's return value is
    pickled and returned here. fn may call
    :func:`ddpspawn.torch.init_process_group` for torch.distributed's default
    group over the same ranks (docs/bring-your-own-model.md).

    Args:
        fn: the worker function. With ``start_method="spawn"`` or
            ``"forkserver"`` it must be importable by module and qualified
            name (no lambdas or nested functions); ``"fork"`` takes any
            callable.
        args: extra positional arguments for fn (pickled unless forked).
        nprocs: number of worker processes, >= 1.
        start_method: "spawn" (a fresh interpreter per rank), "fork" or
            "forkserver". A forked rank keeps this process's open descriptors
            and runs fn on the thread that called spawn: if that thread ran
            multithreaded torch CPU work before (GNU OpenMP's pool does not
            survive fork), fn's own multithreaded torch work hangs; use
            "spawn" or "forkserver" there. "forkserver" starts one fresh
            interpreter (the server) that loads ddpspawn's library and this
            process's main script (a file, as ``__mp_main__``; so its
            imports, torch say, are loaded once), then forks every rank from
            it: spawn's isolation from this process, and later calls from
            this thread with the same nprocs, environment and ``sys.path``
            fork from the same server without loading anything again. As
            with multiprocessing's forkserver, the main script's top level
            runs once, in the server, without the ranks' variables, and must
            not start threads or initialize CUDA.
        timeout: whole-job limit in seconds; None for none.
        grace_period: seconds between SIGTERM and SIGKILL for the other ranks
            once one failed; None: the library's default (5).
        backend: "gloo" or "nccl".
        env: extra environment variables for every rank.
        nnodes, node_rank, master_addr, master_port: a job of several hosts,
            one launcher each (torchrun's names): this call runs ranks
            ``node_rank * nprocs`` to ``node_rank * nprocs + nprocs - 1`` of
            ``nnodes * nprocs``; node 0's launcher serves the rendezvous at
            ``master_addr:master_port`` (both needed). Every node returns rank
            0's value. nnodes and node_rank left None are the library's
            defaults (one node, node 0).
        max_restarts: torchrun's --max-restarts: when a rank fails, every
            rank starts again (fn runs anew), up to this many times; each
            start's ranks read which it is in ``TORCHELASTIC_RESTART_COUNT``
            (0, 1, ...) and continue from whatever state fn keeps. Not after
            an interrupt or the job's timeout. "spawn" and "forkserver" only:
            a restart would fork this interpreter from inside the wait.

    Raises:
        WorkerFailedError: a rank failed; carries its rank and traceback.
        DdpspawnTimeoutError: the job ran past ``timeout``.
        KeyboardInterrupt: the launcher got SIGINT or SIGTERM while waiting.
        InvalidArgumentError: bad arguments, found before any process starts.
    """
    _check_arguments(fn, nprocs, start_method, timeout, grace_period, backend, env)
    # What fits the C fields; the library checks that they describe a job.
    for name, value, low, high in (("nnodes", nnodes, 1, 2**31 - 1),
                                   ("node_rank", node_rank, 0, 2**31 - 1),
                                   ("max_restarts", max_restarts, 0, 2**31 - 1),
                                   ("master_port", master_port, 0, 65535)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidArgumentError(f"{name} must be an int in [{low}, {high}], not {value!r}")
    if max_restarts and start_method == "fork":
        raise InvalidArgumentError(
            "max_restarts with start_method='fork' is not supported: a restart would fork this "
            "interpreter from inside the wait; use 'spawn' or 'forkserver'"
        )
    if master_addr is not None and not isinstance(master_addr, str):
        raise InvalidArgumentError(f"master_addr must be a str, not {master_addr!r}")
    if _payload.loading_main():
        raise DdpspawnError(
            "ddpspawn.spawn was called while a spawn-mode worker was loading the "
            "main script: put the launch under 'if __name__ == \"__main__\":' so "
            "that workers do not launch again"
        )
    options = _lib.launch_options()
    options.nprocs = nprocs
    options.start_method = start_method.encode()
    options.timeout_s = float(timeout or 0.0)
    # What the caller left out keeps the library's default.
    if grace_period is not None:
        options.grace_period_s = float(grace_period)
    if nnodes is not None:
        options.nnodes = nnodes
    if node_rank is not None:
        options.node_rank = node_rank
    if master_addr is not None:
        options.master_addr = master_addr.encode()
    if master_port is not None:
        options.master_port = master_port
    options.max_restarts = max_restarts
    keep_alive: List[object] = []  # what the C side points into, until the job ends
    payload_path = None
    try:
        rank_env = _worker_env(start_method, env)
        if start_method == "spawn":
            payload_path = _payload.write(fn, args, backend)
            start = _configure_spawn(options, payload_path, keep_alive)
        elif start_method == "forkserver":
            payload_path = _payload.write(fn, args, backend)
            start, payload_env = _configure_forkserver(options, payload_path, keep_alive)
            rank_env.update(payload_env)
        else:
            start = _configure_fork(options, fn, args, backend, keep_alive)
        env_entries = [f"{k}={v}" for k, v in rank_env.items()]
        if env_entries:
            env_array = _c_strings(env_entries)
            options.env = ctypes.cast(env_array, ctypes.POINTER(ctypes.c_char_p))
            keep_alive.append(env_array)
        return _run_job(options, start)
    finally:
        _payload.remove(payload_path)
