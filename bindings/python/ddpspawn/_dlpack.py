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
from typing import Any, List, Optional

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


# DLManagedTensor: a DLTensor (data, device, ndim, dtype, shape, strides,
# byte_offset: 48 bytes on 64-bit platforms), manager_ctx, then deleter.
_DELETER_OFFSET = 56
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Prototypes of their own: ctypes.pythonapi's attributes are shared objects
# (_get_pointer above takes a py_object; a destructor gets a raw pointer).
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_pointer_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _Destructor)(
    ("PyCapsule_New", ctypes.pythonapi)
)


def _release_unconsumed(capsule: Optional[int]) -> None:
    # A consumer (torch.from_dlpack) renames the capsule "used_dltensor" and
    # owns the tensor from then on; one never consumed releases it here.
    if capsule and _is_valid(capsule, b"dltensor"):
        managed = _pointer_of(capsule, b"dltensor")
        deleter = ctypes.c_void_p.from_address(managed + _DELETER_OFFSET).value
        if deleter:
            _Deleter(deleter)(managed)


# Kept for as long as the module: capsules call it when they go.
_RELEASE_UNCONSUMED = _Destructor(_release_unconsumed)


def owned_capsule(managed: Optional[int]) -> Any:
    """A "dltensor" capsule that owns the library's DLManagedTensor at
    ``managed``: ``torch.from_dlpack`` (or any consumer) takes it over, and
    the capsule releases it when it is never consumed."""
    if not managed:
        raise ValueError("the library returned no tensor")
    return _new_capsule(managed, b"dltensor", _RELEASE_UNCONSUMED)


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
