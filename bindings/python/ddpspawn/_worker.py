"""Entry points of the workers that are not forked from the launcher.

``python -m ddpspawn._worker PAYLOAD``: a spawn-mode rank. The launcher starts
one such interpreter per rank; it reads the payload the launcher wrote, imports
fn, and runs it through :func:`ddpspawn._run.run_rank`.

:func:`serve`: the forkserver, which the launcher starts once (``python -c``);
it loads the library, then forks each rank, which runs the payload its
environment names. Nothing here may run on import: this module is executed as
``__main__``.
"""

from __future__ import annotations

import _imp
import ctypes
import os
import signal
import sys
from typing import List

from ddpspawn import _lib, _payload, _run

# The launcher's socket in a forkserver (the library's kForkserverFdEnv).
_SERVER_FD_ENV = "DDPSPAWN_FORKSERVER_FD"


def _run_payload(path: str) -> int:
    """Runs this rank from the payload at ``path``; returns the exit code."""
    try:
        fn, args, backend = _payload.load_target(_payload.read(path))
    except BaseException:
        code = _run.report_exception()
        _run.flush_std_streams()
        return code
    return _run.run_rank(fn, args, backend)


def _become_rank() -> None:
    """Makes the interpreter of a rank the server forked whole again.

    The fork happened inside the library, so CPython's own after-fork work
    (threading, locks, ``os.register_at_fork`` hooks) runs here; the library
    gave the rank the default signal actions, so Python's own handlers (its
    KeyboardInterrupt on SIGINT, SIGPIPE ignored) go back in place, as a
    spawned interpreter has them; ``os.environ`` takes the rank's environment.
    """
    # PyOS_AfterFork_Child expects the import lock that PyOS_BeforeFork takes
    # (3.13 and later release it; earlier versions reset it): take it here.
    _imp.acquire_lock()
    after_fork = ctypes.pythonapi.PyOS_AfterFork_Child
    after_fork.restype = None
    after_fork.argtypes = []
    after_fork()
    for number in signal.valid_signals():
        handler = signal.getsignal(number)
        if handler not in (None, signal.SIG_DFL):
            signal.signal(number, handler)
    _run._sync_environ()


def _preload(preload: str) -> None:
    """Loads what the server loads before it serves (only in a server). The
    main script's code must not reach the launcher's socket: a child it
    starts neither inherits the descriptor nor sees the variable."""
    fd_text = os.environ.get(_SERVER_FD_ENV)
    if not fd_text:
        return
    os.set_inheritable(int(fd_text), False)
    del os.environ[_SERVER_FD_ENV]
    try:
        _payload.preload(preload)
    finally:
        _run.flush_std_streams()  # else every rank prints it again
        os.environ[_SERVER_FD_ENV] = fd_text


def serve(library: str, preload: str) -> int:
    """The forkserver: serves forks until the launcher goes; returns in each
    rank with its exit code. ``library``: the path the launcher loaded, or "";
    ``preload``: what to load first (:func:`ddpspawn._payload.server_preload`)."""
    if library:
        os.environ[_lib.LIBRARY_ENV] = library
    try:
        lib = _lib.lib()
        _preload(preload)
        served = lib.ddpspawn_serve_forks_if_forkserver()
    except BaseException:
        # The server could not load the library: the launcher reports that it
        # ended before it was ready, and this text is on its stderr.
        return _run.report_exception()
    if not served:
        sys.stderr.write("ddpspawn._worker.serve runs only as a forkserver a launcher started\n")
        return 2
    _become_rank()
    path = os.environ.get(_payload.PAYLOAD_ENV)
    if not path:
        _lib.lib().ddpspawn_worker_set_error(
            f"the forkserver's rank has no {_payload.PAYLOAD_ENV}".encode()
        )
        return 1
    return _run_payload(path)


def main(argv: List[str]) -> int:
    """Runs this spawned rank; returns the process exit code."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m ddpspawn._worker PAYLOAD\n")
        return 2
    return _run_payload(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
