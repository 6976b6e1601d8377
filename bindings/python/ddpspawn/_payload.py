"""The spawn and forkserver start methods' payload: what a fresh interpreter
needs to run fn.

The launcher writes it (:func:`write`) to a private temporary file; each
worker reads it (:func:`read`) and rebuilds fn and its arguments
(:func:`load_target`). fn travels by reference (module and qualified name),
never pickled by value, so it must be importable from the worker.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import pickle
import runpy
import sys
import tempfile
import types
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ._errors import InvalidArgumentError

_FORMAT = 1  # bump when the payload's keys change
# A forkserver's rank finds its payload's path here (a spawned rank, in argv).
PAYLOAD_ENV = "DDPSPAWN_PYTHON_PAYLOAD"
_MAIN_NAMES = ("__main__", "__mp_main__")  # a worker knows its main by both

# True while a spawn-mode worker runs the launcher's main script.
_loading_main = False
# A forkserver's rank: the main its server loaded (main_path or main_module).
_preloaded_main: Optional[Dict[str, str]] = None
# The main this process loaded itself (main_path or main_module). Not sys.modules["__mp_main__"]:
# importing torch makes that an alias of __main__.
_loaded_main: Optional[Dict[str, str]] = None


def loading_main() -> bool:
    """Whether this process is a spawn-mode worker still loading the main
    script (a launch from there is a missing ``__name__`` guard)."""
    return _loading_main


def _main_module_source() -> Dict[str, str]:
    """How a worker can load the launcher's ``__main__``: a path or a module."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:  # started as "python -m name"
        return {"main_module": spec.name}
    path = getattr(main, "__file__", None)
    if path:
        return {"main_path": os.path.abspath(path)}
    raise InvalidArgumentError(
        "fn is defined in __main__, but __main__ has no file (interactive "
        "session or stdin), so spawned or forkserver workers cannot load it; define fn in a "
        "module or use start_method='fork'"
    )


def server_preload() -> str:
    """What a forkserver loads before it serves, as JSON: this process's
    ``sys.path`` and its main script (a file; as multiprocessing's forkserver
    does), so that ranks fork with the script's imports (torch, say) already
    loaded. A main run as ``python -m`` is left to the ranks."""
    preload: Dict[str, Any] = {"sys_path": list(sys.path)}
    try:
        source = _main_module_source()
    except InvalidArgumentError:
        source = {}  # an interactive main: nothing to load
    if "main_path" in source:
        preload.update(source)
    return json.dumps(preload)


def preload(text: str) -> None:
    """In a forkserver: loads what :func:`server_preload` described. A main
    that fails to load is left to the ranks, which load it again and report
    the error as their own."""
    global _preloaded_main
    description = json.loads(text)
    sys.path[:] = description["sys_path"]
    source = {k: v for k, v in description.items() if k == "main_path"}
    if not source:
        return
    try:
        _load_main(source)
    except BaseException:  # SystemExit too: the script is not the server's to end
        sys.modules.pop("__mp_main__", None)
        return
    _preloaded_main = source
    _preload_torch_optim()


def _preload_torch_optim() -> None:
    """torch imports ``torch._dynamo`` when a process makes its first
    ``torch.optim`` optimizer (0.8 s and about 110 MB here, most of a forked
    rank's way to its first batch). Where the main script imported torch, the
    server imports it once, so that every rank forks with it loaded. It starts
    no thread and does not initialize CUDA (test_launch checks both in the
    server's ranks)."""
    if "torch" not in sys.modules:
        return
    try:
        importlib.import_module("torch._dynamo")
    except Exception:  # noqa: BLE001  # the ranks import it themselves, and report what fails
        pass


def _lookup(module_name: str, qualname: str) -> Any:
    obj: Any = sys.modules[module_name]
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def describe(fn: Callable[..., Any]) -> Dict[str, str]:
    """fn's module and qualified name, checked to lead back to fn itself.

    Raises InvalidArgumentError for lambdas, nested functions and anything
    else a fresh interpreter could not find by name.
    """
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    advice = (
        "the spawn and forkserver start methods import fn by module and name in each worker, "
        "so it must be a function defined at the top level of a module; use "
        "start_method='fork' or move it"
    )
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise InvalidArgumentError(f"{fn!r} has no module or qualified name: {advice}")
    if "<lambda>" in qualname or "<locals>" in qualname:
        kind = "a lambda" if "<lambda>" in qualname else "a nested function"
        raise InvalidArgumentError(f"fn {qualname!r} is {kind}: {advice}")
    try:
        found = _lookup(module_name, qualname)
    except (KeyError, AttributeError):
        found = None
    if found is not fn:
        raise InvalidArgumentError(
            f"fn {module_name}.{qualname} cannot be found again under that name: "
            f"{advice}"
        )
    described = {"module": module_name, "qualname": qualname}
    if module_name in _MAIN_NAMES:
        described.update(_main_module_source())
    else:
        # args may hold objects of classes defined in __main__ (a LightningModule of the
        # user's script, say): a worker loads the main script when their pickles name it.
        try:
            described.update(_main_module_source())
        except InvalidArgumentError:
            pass  # an interactive main: nothing of it can be unpickled in a worker
    return described


def write(
    fn: Callable[..., Any], args: Sequence[Any], backend: str
) -> str:
    """Writes the payload to a new 0600 temporary file; returns its path.

    The caller deletes the file when the job is over.
    """
    payload: Dict[str, Any] = describe(fn)
    try:
        pickled_args = pickle.dumps(tuple(args))
    except Exception as error:
        raise InvalidArgumentError(
            f"the spawn and forkserver start methods pickle args, and they cannot be pickled: "
            f"{error}"
        ) from error
    payload.update(
        format=_FORMAT,
        sys_path=list(sys.path),
        backend=backend,
        args=pickled_args,  # unpickled only once fn's module is loaded
    )
    fd, path = tempfile.mkstemp(prefix="ddpspawn-", suffix=".payload")
    with os.fdopen(fd, "wb") as file:  # mkstemp creates it with mode 0600
        pickle.dump(payload, file)
    return path


def read(path: str) -> Dict[str, Any]:
    """Reads a payload written by :func:`write`."""
    with open(path, "rb") as file:
        payload: Dict[str, Any] = pickle.load(file)
    if payload.get("format") != _FORMAT:
        raise RuntimeError(f"{path}: unknown ddpspawn payload format")
    return payload


def _load_main(payload: Dict[str, Any]) -> None:
    """Loads the launcher's main script as ``__mp_main__``, as multiprocessing
    does: its ``if __name__ == "__main__":`` block does not run again, and it
    is also registered as ``__main__`` so pickles that name it resolve."""
    global _loading_main, _loaded_main
    _loading_main = True
    try:
        if "main_path" in payload:
            namespace = runpy.run_path(payload["main_path"], run_name="__mp_main__")
        else:
            namespace = runpy.run_module(
                payload["main_module"], run_name="__mp_main__", alter_sys=True
            )
    finally:
        _loading_main = False
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(namespace)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module
    _loaded_main = {k: v for k, v in payload.items() if k in ("main_path", "main_module")}


def load_target(payload: Dict[str, Any]) -> Tuple[Callable[..., Any], Tuple[Any, ...], str]:
    """Puts sys.path in place, imports fn and unpickles args.

    Returns ``(fn, args, backend)``.
    """
    sys.path[:] = payload["sys_path"]
    if payload["module"] in _MAIN_NAMES:
        _load_main_once(payload)
    else:
        __import__(payload["module"])
    fn = _lookup(payload["module"], payload["qualname"])
    args = _ArgsUnpickler(io.BytesIO(payload["args"]), payload).load()
    return fn, args, payload["backend"]


def _load_main_once(payload: Dict[str, Any]) -> None:
    """Loads the launcher's main script unless this process has it already."""
    source = {k: v for k, v in payload.items() if k in ("main_path", "main_module")}
    if source and source != _preloaded_main and source != _loaded_main:
        _load_main(payload)


class _ArgsUnpickler(pickle.Unpickler):
    """Unpickles args, loading the launcher's main script first when a pickle names it (as
    multiprocessing's spawn loads it before anything is unpickled)."""

    def __init__(self, file: Any, payload: Dict[str, Any]) -> None:
        super().__init__(file)
        self._payload = payload

    def find_class(self, module: str, name: str) -> Any:
        if module in _MAIN_NAMES:
            _load_main_once(self._payload)
        return super().find_class(module, name)


def remove(path: Optional[str]) -> None:
    """Deletes a payload file, if there is one."""
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
