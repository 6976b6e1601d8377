"""Tensors with ``__dlpack__`` (torch, JAX, CuPy, ...) as borrowed DLTensors
for the collectives of ``ddpspawn_dlpack.h``.

The tensor's capsule is held for the call and released afterwards without
being consumed, so its producer frees nothing that the caller still uses, and
the library writes straight into the tensor's memory. Which dtypes, devices
and layouts are accepted is the library's to say (its errors name the cause).
NumPy arrays keep the buffer path of ``_buffers``.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, List

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def is_tensor(data: Any) -> bool:
    """True for a DLPack producer that is not a NumPy array."""
    if not hasattr(type(data), "__dlpack__"):
        return False
    numpy = sys.modules.get("numpy")
    return numpy is None or not isinstance(data, numpy.ndarray)


class Borrowed:
    """A tensor's DLPack capsule, and its DLTensor as a ``void*`` argument.

    Keep the object alive for the duration of the call that uses ``pointer``.
    """

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        try:
            # The legacy (unversioned) capsule: "dltensor", whose
            # DLManagedTensor starts with its DLTensor.
            self._capsule = tensor.__dlpack__()
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            raise ValueError(
                f"a {type(tensor).__name__} could not be passed through DLPack: {error}"
            ) from error
        self.pointer = ctypes.c_void_p(_get_pointer(self._capsule, b"dltensor"))


def gather_output(tensor: Any, world_size: int) -> Any:
    """A new tensor of ``tensor``'s kind, dtype and device, shaped
    ``[world_size, *tensor.shape]`` (the producer's ``new_empty``)."""
    new_empty = getattr(tensor, "new_empty", None)
    if new_empty is None:
        raise TypeError(
            f"all_gather of a {type(tensor).__name__} needs its new_empty method "
            "to allocate the result; pass a torch tensor or a NumPy array"
        )
    return new_empty((world_size,) + tuple(tensor.shape))


def split(output: Any, world_size: int) -> List[Any]:
    """One view per rank of a gathered ``output``."""
    return [output[r] for r in range(world_size)]
