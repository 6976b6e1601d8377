"""Checkpoints of named tensors in the Trainer's format (``ddpspawn_dlpack.h``'s
``ddpspawn_checkpoint_save_dlpack`` and ``ddpspawn_checkpoint_load_dlpack``):
what ``ddpspawn export``, :func:`ddpspawn.torch.load_weights` and the CLI's
``--checkpoint`` read, and what the Trainer and C++'s ``Fabric::Save`` write.
The tensors travel through DLPack, borrowed for the call; no logic here.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, List, Mapping, Tuple, Union

from . import _dlpack, _lib


def _arguments(tensors: Mapping[str, Any]) -> Tuple[Any, Any, List[Any], int]:
    """The names and DLTensor pointers as C arrays, and the Borrowed objects
    that keep them valid for the call."""
    names = list(tensors)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"tensor names are str, not {type(name).__name__}")
    borrowed = [_dlpack.Borrowed(tensors[name]) for name in names]
    c_names = (ctypes.c_char_p * max(len(names), 1))(*[n.encode() for n in names])
    pointers = (ctypes.c_void_p * max(len(names), 1))(*[b.pointer for b in borrowed])
    return c_names, pointers, borrowed, len(names)


def save(library: Any, context: Any, path: Union[str, "os.PathLike[str]"],
         tensors: Mapping[str, Any], step: int) -> None:
    """Context.save_checkpoint's call, on the live context handle ``context``."""
    c_names, pointers, borrowed, count = _arguments(tensors)
    _lib.check(library.ddpspawn_checkpoint_save_dlpack(
        context, os.fsencode(path), c_names, pointers, count, step))
    del borrowed  # held until the call returned


def load_checkpoint(path: Union[str, "os.PathLike[str]"], tensors: Mapping[str, Any]) -> int:
    """Reads the checkpoint at ``path`` into ``tensors`` (a mapping of names to
    tensors with ``__dlpack__``, e.g. ``module.state_dict()``) in place, each
    from its name's entry, on this process alone; returns the checkpoint's
    step. A name the checkpoint lacks, or another shape or dtype, is
    :class:`InvalidArgumentError` naming it, and then no tensor has changed.
    Reads the Trainer's checkpoints, C++'s ``Fabric::Save`` files and
    :meth:`Context.save_checkpoint`'s."""
    c_names, pointers, borrowed, count = _arguments(tensors)
    step = ctypes.c_int64()
    _lib.check(_lib.lib().ddpspawn_checkpoint_load_dlpack(
        os.fsencode(path), c_names, pointers, count, ctypes.byref(step)))
    del borrowed
    return step.value
