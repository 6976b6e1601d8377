"""Training runs: ``fit``, ``validate``, ``test`` and ``predict`` through
``ddpspawn_run``.

The library forks the ranks from this process and runs the whole loop in C++
(LibTorch): the built-in ``mlp:IN,HIDDEN...,OUT`` model or a TorchScript file
whose exported methods are the steps. Options are the ddpspawn CLI's flags,
passed as ``key=value`` strings; the library checks data, model and options
before any process starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import numbers
import os
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _lib
from ._errors import DdpspawnError, InvalidArgumentError, WorkerFailedError
from ._run import flush_std_streams

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
#: A CSV file (label in the last column), or ``(features.npy, labels.npy)``.
Data = Union[PathLike, Tuple[PathLike, PathLike]]
#: ``"mlp:IN,HIDDEN...,OUT"``, a TorchScript file, or a ``torch.jit.ScriptModule``.
Model = Any

# Keys the functions' own arguments set; in **options they are an error.
_DATA_KEYS = ("train", "train_labels", "val", "val_labels", "data", "data_labels")
_NPROCS_KEYS = ("nproc_per_node",)

# Runs are serialized: each forks the whole process and installs signal
# handlers while it waits, so two at once would get in each other's way.
_run_lock = threading.Lock()

@dataclass(frozen=True)
class FitResult:
    """What :func:`fit` hands back (rank 0's result).

    Attributes:
        checkpoint: the final checkpoint (weights, optimizer state, position,
            RNG). Continue training with ``resume_from=result.checkpoint``
            (see :meth:`resume_options`); start validate/test/predict from it
            with ``checkpoint=result.checkpoint``.
        metrics_csv: the metrics log (columns epoch, step, name, value).
        epoch: epochs completed.
        global_step: optimizer steps taken.
        metrics: the last value of every logged metric, e.g. ``train_loss_epoch``,
            ``val_loss``, ``val_accuracy``.
        values: every key=value pair of the result, as text.
        stopped_by: what ended fit before max_epochs or max_steps:
            ``"early_stopping"``, ``"max_time"`` or a signal's name
            (``"SIGUSR1"``); empty when nothing did.
        best_model_path: with ``monitor`` (or ``checkpoint_filename``), the
            best checkpoint kept beside ``last.ckpt``; else empty.
        best_model_score: with ``monitor``, its value there; else None.
        straggler: which rank arrived last at the collectives during fit, e.g.
            "rank 1 arrived last at 87% of 4,140 collectives, 2.1 ms late on
            average", or why it was not measured (``values`` holds the
            per-rank figures as ``straggler.rank<r>.*``).
        straggler_rank: the rank that arrived last most often; -1 when none
            (or not measured).
    """

    checkpoint: str
    metrics_csv: str
    epoch: int
    global_step: int
    metrics: Dict[str, float]
    values: Dict[str, str] = field(default_factory=dict, repr=False)
    stopped_by: str = ""
    best_model_path: str = ""
    best_model_score: Optional[float] = None
    straggler: str = ""
    straggler_rank: int = -1

    def resume_options(self) -> Dict[str, str]:
        """Options that make a :func:`fit` continue from this one.

        ``ddpspawn.fit(model, train, **result.resume_options(), max_epochs=20)``
        goes on until epoch 20 (``max_epochs`` counts from the start).
        """
        return {"resume_from": self.checkpoint}


def _encode_path(what: str, value: Any) -> bytes:
    if isinstance(value, (str, bytes, os.PathLike)):
        encoded = os.fsencode(value)
    else:
        raise InvalidArgumentError(
            f"{what} must be a path (str or os.PathLike), not {type(value).__name__}"
        )
    if not encoded:
        raise InvalidArgumentError(f"{what} is empty")
    return encoded


def _encode_value(key: str, value: Any) -> bytes:
    """An option's value as the library reads it."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, numbers.Integral):
        return str(int(value)).encode()
    if isinstance(value, numbers.Real):
        return repr(float(value)).encode()
    if isinstance(value, (str, bytes, os.PathLike)):
        return os.fsencode(value)
    raise InvalidArgumentError(
        f"option {key}: expected a str, path, number or bool, not {type(value).__name__}"
    )


def _model_entry(model: Model, stack: contextlib.ExitStack) -> bytes:
    """The model option: a spec or path, or a ScriptModule saved to a file."""
    if isinstance(model, (str, bytes, os.PathLike)):
        return _encode_path("model", model)
    # torch stays optional: an object can only be a ScriptModule if the
    # caller imported torch already.
    torch = sys.modules.get("torch")
    if torch is not None:
        if isinstance(model, torch.jit.ScriptModule):
            directory = tempfile.mkdtemp(prefix="ddpspawn-model-")
            stack.callback(shutil.rmtree, directory, ignore_errors=True)
            path = os.path.join(directory, "model.pt")
            torch.jit.save(model, path)
            return os.fsencode(path)
        if isinstance(model, torch.nn.Module):
            raise InvalidArgumentError(
                f"model is a {type(model).__name__} that is not scripted: pass "
                "torch.jit.script(module), whose exported training_step(self, batch: "
                "List[Tensor], batch_idx: int) -> Tensor the library runs"
            )
    raise InvalidArgumentError(
        "model must be 'mlp:IN,HIDDEN...,OUT', a path to a TorchScript file or a "
        f"torch.jit.ScriptModule, not {type(model).__name__}"
    )


def _data_entries(name: str, data: Data) -> List[Tuple[str, bytes]]:
    """``name=path``, or ``name=features`` and ``name_labels=labels``."""
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise InvalidArgumentError(
                f"{name} must be a path or a (features, labels) pair of .npy files, "
                f"not a sequence of {len(data)}"
            )
        return [
            (name, _encode_path(f"{name} features", data[0])),
            (f"{name}_labels", _encode_path(f"{name} labels", data[1])),
        ]
    return [(name, _encode_path(name, data))]


def _option_entries(options: Mapping[str, Any]) -> List[Tuple[str, bytes]]:
    entries = []
    for key, value in options.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise InvalidArgumentError(f"bad option name {key!r}")
        normalized = key.replace("-", "_")
        if normalized in _NPROCS_KEYS:
            raise InvalidArgumentError(
                f"option {key}: give the number of ranks as nprocs=N"
            )
        if normalized in _DATA_KEYS:
            raise InvalidArgumentError(
                f"option {key}: give the data as the function's own argument "
                "(a path, or a (features, labels) pair of .npy files)"
            )
        if value is None:
            continue  # not given
        entries.append((key, _encode_value(key, value)))
    return entries


def _check_nprocs(nprocs: Any) -> None:
    if nprocs is None:
        return
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise InvalidArgumentError(f"nprocs must be an int >= 1, not {nprocs!r}")


def _worker_failed(message: str) -> WorkerFailedError:
    """A WorkerFailedError from how this thread's last ddpspawn_run ended (the failed rank, its
    exit code or signal and its text come from the library, not from the message)."""
    lib = _lib.lib()
    rank = lib.ddpspawn_run_failed_rank()
    text = ""
    exit_code = signal = None
    if rank >= 0:
        raw = ctypes.c_char_p()
        if lib.ddpspawn_run_rank_error(rank, ctypes.byref(raw)) == _lib.OK:
            text = (raw.value or b"").decode("utf-8", "replace")
        report = _lib.rank_report()
        if lib.ddpspawn_run_rank_report(rank, ctypes.byref(report)) == _lib.OK:
            if report.state == _lib.RANK_EXITED:
                exit_code = report.exit_code
            elif report.state == _lib.RANK_SIGNALED:
                signal = report.signal
    return WorkerFailedError(rank, message, text, exit_code=exit_code, signal=signal)


def run(command: str, entries: List[Tuple[str, bytes]]) -> Dict[str, str]:
    """``ddpspawn_run(command, key=value...)``; returns rank 0's pairs."""
    lib = _lib.lib()
    raw = []
    for key, value in entries:
        entry = key.encode() + b"=" + value
        if b"\0" in entry:
            raise InvalidArgumentError(f"option {key} contains a NUL byte")
        raw.append(entry)
    options = (ctypes.c_char_p * (len(raw) + 1))(*raw, None)
    result = _lib.RunResultPtr()
    with _run_lock:
        flush_std_streams()  # output order: ours before the ranks'
        launcher_pid = os.getpid()
        status = lib.ddpspawn_run(command.encode(), options, ctypes.byref(result))
        if os.getpid() != launcher_pid:  # a forked rank must never get here
            os._exit(70)
        if status == _lib.ERR_WORKER_FAILED:
            raise _worker_failed(_lib.last_error())
        _lib.check(status)
    try:
        pairs = {}
        for index in range(lib.ddpspawn_run_result_count(result)):
            pair_key: bytes = lib.ddpspawn_run_result_key(result, index)
            pair_value: bytes = lib.ddpspawn_run_result_value(result, index)
            pairs[pair_key.decode("utf-8", "replace")] = pair_value.decode("utf-8", "replace")
        return pairs
    finally:
        lib.ddpspawn_run_result_destroy(result)


def _run_command(
    command: str,
    model: Model,
    data: List[Tuple[str, bytes]],
    nprocs: Optional[int],
    options: Mapping[str, Any],
) -> Dict[str, str]:
    _check_nprocs(nprocs)
    option_entries = _option_entries(options)
    with contextlib.ExitStack() as stack:
        entries = [("model", _model_entry(model, stack))] + data
        if nprocs is not None:
            entries.append(("nproc_per_node", str(nprocs).encode()))
        return run(command, entries + option_entries)


def _metrics(values: Mapping[str, str]) -> Dict[str, float]:
    return {
        key[len("metric."):]: float(value)
        for key, value in values.items()
        if key.startswith("metric.")
    }


def fit(
    model: Model,
    train: Data,
    *,
    val: Optional[Data] = None,
    nprocs: Optional[int] = None,
    **options: Any,
) -> FitResult:
    """Trains ``model`` on ``train`` in ``nprocs`` forked ranks (DDP on CPU).

    Args:
        model: ``"mlp:IN,HIDDEN...,OUT"`` (the built-in multilayer perceptron:
            several outputs make it a classifier, whose labels must be
            integers, one output per label a regressor), a path to a TorchScript file, or a ``torch.jit.ScriptModule`` (saved
            to a temporary file first). A TorchScript module exports
            ``training_step(self, batch: List[Tensor], batch_idx: int) -> Tensor``
            and optionally ``validation_step`` / ``test_step`` (``-> Dict[str,
            Tensor]``) and ``predict_step`` (``-> Tensor``); ``batch`` is
            ``[features, labels]``.
        train: a CSV file (label in the last column) or a ``(features.npy,
            labels.npy)`` pair.
        val: validation data, the same way; validated every
            ``check_val_every_n_epoch`` epochs.
        nprocs: number of ranks (default 1). Under torchrun or srun this
            process is one rank of that job, which sets the number; a
            different ``nprocs`` is an error.
        **options: the ddpspawn CLI's options as Python names, e.g.
            ``max_epochs=5, lr=0.1, batch_size=32, optimizer="adam", seed=0,
            default_root_dir="logs", resume_from=..., timeout=600,
            max_time="00:01:00:00", max_restarts=1, checkpoint_every_n_steps=50,
            nnodes=2, node_rank=0, master_addr="10.0.0.1"``. As in Lightning,
            ``timeout`` is each collective's limit (default 1800 s) and
            ``max_time`` stops fit gracefully (with its checkpoint) once
            passed; ``max_restarts`` starts failed ranks again from this
            fit's last checkpoint (docs/multinode.md). Bools become
            true/false; None means "not given".

    Raises:
        InvalidArgumentError: bad data, model or options, found before any
            process starts (the message names what is wrong).
        WorkerFailedError: a rank failed while running (``.rank``,
            ``.traceback_text``).
        DdpspawnTimeoutError: a collective waited longer than ``timeout``
            seconds for a rank (the message names the ranks that never
            arrived and what every rank was last doing).
    """
    data = _data_entries("train", train)
    if val is not None:
        data += _data_entries("val", val)
    values = _run_command("fit", model, data, nprocs, options)
    return FitResult(
        checkpoint=values.get("checkpoint", ""),
        metrics_csv=values.get("metrics_csv", ""),
        epoch=int(values.get("epoch", "0")),
        global_step=int(values.get("global_step", "0")),
        metrics=_metrics(values),
        values=values,
        stopped_by=values.get("stopped_by", ""),
        best_model_path=values.get("best_model_path", ""),
        best_model_score=(
            float(values["best_model_score"]) if "best_model_score" in values else None
        ),
        straggler=values.get("straggler", ""),
        straggler_rank=int(values.get("straggler.rank", "-1")),
    )


def _evaluate(
    command: str,
    model: Model,
    data: Data,
    checkpoint: Optional[PathLike],
    nprocs: Optional[int],
    options: Mapping[str, Any],
) -> Dict[str, str]:
    entries = _data_entries("data", data)
    if checkpoint is not None:
        entries.append(("checkpoint", _encode_path("checkpoint", checkpoint)))
    return _run_command(command, model, entries, nprocs, options)


def validate(
    model: Model,
    data: Data,
    *,
    checkpoint: Optional[PathLike] = None,
    nprocs: Optional[int] = None,
    **options: Any,
) -> Dict[str, float]:
    """Runs ``model``'s validation over ``data``; returns the metrics averaged
    over the dataset and the ranks (e.g. ``{"val_loss": ..., "val_accuracy": ...}``).

    ``checkpoint`` (e.g. ``FitResult.checkpoint``) gives the weights. The
    other arguments are as for :func:`fit`.
    """
    return _metrics(_evaluate("validate", model, data, checkpoint, nprocs, options))


def test(
    model: Model,
    data: Data,
    *,
    checkpoint: Optional[PathLike] = None,
    nprocs: Optional[int] = None,
    **options: Any,
) -> Dict[str, float]:
    """Like :func:`validate` with ``test_step`` (metrics such as ``test_loss``,
    ``test_accuracy``); a TorchScript module without ``test_step`` uses its
    ``validation_step``."""
    return _metrics(_evaluate("test", model, data, checkpoint, nprocs, options))


def export(checkpoint: PathLike, output: PathLike, *, format: str = "torch") -> int:
    """Writes the weights of ``checkpoint`` (a ddpspawn checkpoint, or an
    exported file to convert) to ``output`` as a state dict for
    ``torch.load`` (``format="torch"``) or as safetensors
    (``"safetensors"``), like ``ddpspawn export``; ``output`` is replaced
    atomically and never written through a link. No process is started.
    Returns the number of tensors written."""
    if not isinstance(format, str):
        raise InvalidArgumentError(f"format must be a str, not {type(format).__name__}")
    result = run(
        "export",
        [
            ("checkpoint", _encode_path("checkpoint", checkpoint)),
            ("output", _encode_path("output", output)),
            ("format", _encode_value("format", format)),
        ],
    )
    return int(result["tensors"])


def _read_predictions(path: str) -> List[Any]:
    rows: List[List[str]] = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            line = line.strip()
            if line:
                rows.append(line.split(","))
    integral = all(
        re.fullmatch(r"-?\d+", value) is not None for row in rows for value in row
    )
    convert = int if integral else float
    if all(len(row) == 1 for row in rows):
        return [convert(row[0]) for row in rows]
    return [[convert(value) for value in row] for row in rows]


def predict(
    model: Model,
    data: Data,
    *,
    checkpoint: Optional[PathLike] = None,
    nprocs: Optional[int] = None,
    **options: Any,
) -> List[Any]:
    """Every sample's prediction, in dataset order.

    One entry per sample: a number when the model predicts one value per
    sample (for the built-in classifier, the predicted class), else a list.
    The values are ints when every prediction is integral (a classifier's
    classes), else floats. The library writes them to
    ``<default_root_dir>/predictions.csv`` (6 significant digits), which is
    read back here. The other arguments are as for :func:`validate`.
    """
    values = _evaluate("predict", model, data, checkpoint, nprocs, options)
    path = values.get("predictions")
    if not path:
        raise DdpspawnError(f"the predict run returned no predictions file: {values}")
    predictions = _read_predictions(path)
    count = values.get("count")
    if count is not None and int(count) != len(predictions):
        raise DdpspawnError(f"{path} has {len(predictions)} rows, the run reported {count}")
    return predictions
