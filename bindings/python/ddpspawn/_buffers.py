"""Turns Python data into typed C buffers for the collectives, and back.

Accepted data:

* a list (or tuple) of numbers: copied into a new int64 array when every
  element is an integer, else a float64 one; results come back as a new list;
* ``array.array`` with typecode 'f', 'd', 'i', 'l' or 'q';
* numpy arrays of float32, float64, int32 or int64 (numpy is optional: it is
  only looked at when the caller already imported it);
* any other object with the buffer protocol (``memoryview``, ...) whose
  format is f, d, i, l or q.

Element types are chosen by kind (float or signed integer) and item size.
Operations that write in place need a writable, C-contiguous buffer.

The gradient reducer (:func:`reducer_buffer`) takes the same buffers but no
lists: it writes into the caller's memory across many calls.
"""

from __future__ import annotations

import array
import ctypes
import numbers
import sys
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
    cast,
)

from . import _lib

DTYPE_NAMES = {
    _lib.FLOAT32: "float32",
    _lib.FLOAT64: "float64",
    _lib.INT32: "int32",
    _lib.INT64: "int64",
}

if TYPE_CHECKING:  # pragma: no cover
    import numpy.typing as npt

# Native struct format character -> kind; the dtype also depends on itemsize.
_Format = Literal["f", "d", "i", "l", "q"]
_KINDS = {"f": "float", "d": "float", "i": "int", "l": "int", "q": "int"}
_DTYPES = {
    ("float", 4): _lib.FLOAT32,
    ("float", 8): _lib.FLOAT64,
    ("int", 4): _lib.INT32,
    ("int", 8): _lib.INT64,
}
_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"

# Python's ctypes.c_void_p accepts these as pointer arguments.
PointerArg = Union["ctypes.Array[ctypes.c_char]", bytes]


def _numpy_array_type() -> Optional[Type[npt.NDArray[Any]]]:
    """numpy.ndarray if numpy is already imported, else None."""
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "ndarray", None)


def _describe(data: Any) -> str:
    ndarray = _numpy_array_type()
    if ndarray is not None and isinstance(data, ndarray):
        return f"numpy array of {data.dtype}"
    return type(data).__name__


def _native_format(view: memoryview) -> str:
    """The view's format as one native character, e.g. 'f'; '' if not one."""
    fmt = view.format
    if fmt[:1] in ("@", "=", _NATIVE_ORDER):
        fmt = fmt[1:]
    return fmt if len(fmt) == 1 else ""


def _numbers_to_array(values: Sequence[Any]) -> Union[array.array[int], array.array[float]]:
    """A new int64 array if every value is an integer, else a float64 one."""
    if all(isinstance(v, numbers.Integral) for v in values):
        return array.array("q", (int(v) for v in values))
    if all(isinstance(v, numbers.Real) for v in values):
        return array.array("d", (float(v) for v in values))
    bad = next(v for v in values if not isinstance(v, numbers.Real))
    raise TypeError(f"a list for a collective must hold only numbers, not {bad!r}")


class Buffer:
    """Typed contiguous memory that one collective call reads or writes.

    Attributes:
        source: the caller's object (for a list, the array copied from it).
        view: a memoryview of the memory, with its native format.
        fmt: that format as one character ('f', 'd', 'i', 'l' or 'q').
        dtype: the DDPSPAWN_* element type.
        count: the number of elements.
        is_list: whether the caller passed a list, so results are lists.
    """

    def __init__(self, data: Any, writable: bool) -> None:
        self.is_list = isinstance(data, (list, tuple))
        self.source = _numbers_to_array(data) if self.is_list else data
        try:
            view = memoryview(self.source)
        except TypeError:
            raise TypeError(
                f"unsupported data for a collective: {_describe(data)}; pass a "
                "list of numbers, an array.array, a numpy array or a buffer "
                "(memoryview) of float32, float64, int32 or int64"
            ) from None
        fmt = _native_format(view)
        kind = _KINDS.get(fmt)
        dtype = _DTYPES.get((kind, view.itemsize)) if kind else None
        if dtype is None:
            raise TypeError(
                f"unsupported element type for a collective: {_describe(data)} "
                f"with format {view.format!r} and item size {view.itemsize}; "
                "supported are float32, float64, int32 and int64 in native "
                "byte order"
            )
        if writable and view.readonly:
            raise ValueError(
                f"this collective writes into its data in place, but the "
                f"{_describe(data)} is read-only"
            )
        if writable and not view.c_contiguous:
            raise ValueError(
                f"this collective writes into its data in place, but the "
                f"{_describe(data)} is not C-contiguous (copy it first, e.g. "
                "with numpy.ascontiguousarray)"
            )
        self.fmt = cast(_Format, fmt)  # a key of _KINDS: its dtype was found
        self.view = view
        self.dtype = dtype
        self.count = view.nbytes // view.itemsize

    @property
    def nbytes(self) -> int:
        return self.view.nbytes

    def shared(self) -> ctypes.Array[ctypes.c_char]:
        """The memory itself as a ctypes array (it must be writable and C-contiguous)."""
        return (ctypes.c_char * self.nbytes).from_buffer(self.view.cast("B"))

    def pointer(self) -> PointerArg:
        """An argument for a ``void*`` parameter that points at the data.

        Writable contiguous memory is shared; anything else is copied into a
        bytes object in C order (only for parameters the call reads).
        """
        if self.view.c_contiguous and not self.view.readonly:
            return self.shared()
        return self.view.tobytes()

    def result(self) -> Any:
        """What an in-place collective returns: a new list or the caller's object."""
        return self.source.tolist() if self.is_list else self.source

    def gather_output(self, world_size: int) -> Tuple[PointerArg, Callable[[], List[Any]]]:
        """Memory for ``world_size`` copies of this buffer, and a splitter.

        The splitter returns one object per rank, of the caller's kind: a list,
        an ``array.array``, a numpy array (same dtype and shape) or a
        memoryview (same format and shape) over new memory.
        """
        ndarray = _numpy_array_type()
        if ndarray is not None and isinstance(self.source, ndarray):
            numpy = sys.modules["numpy"]
            shape = (world_size,) + tuple(self.source.shape)
            stacked = numpy.empty(shape, dtype=self.source.dtype)
            return (ctypes.c_char * stacked.nbytes).from_buffer(stacked), (
                lambda: [stacked[i] for i in range(world_size)]
            )

        out = bytearray(self.nbytes * world_size)
        size = self.nbytes

        def split() -> List[Any]:
            chunks = [out[i * size : (i + 1) * size] for i in range(world_size)]
            if self.is_list:
                return [memoryview(c).cast(self.fmt).tolist() for c in chunks]
            if isinstance(self.source, array.array):
                copies = []
                for chunk in chunks:
                    copy = array.array(self.source.typecode)
                    copy.frombytes(chunk)
                    copies.append(copy)
                return copies
            shape = self.view.shape or ()  # () for a 0-dimensional view
            return [memoryview(c).cast(self.fmt, shape) for c in chunks]

        return (ctypes.c_char * len(out)).from_buffer(out), split


_REDUCER_ADVICE = (
    "pass a numpy array, an array.array or a writable memoryview of float32, "
    "float64, int32 or int64 (a torch CPU tensor as tensor.numpy())"
)


def reducer_buffer(data: Any, index: int) -> Buffer:
    """Gradient buffer ``index`` of a reducer: non-empty, writable, C-contiguous
    memory that stays the caller's and is written in place by every finalize.

    Raises TypeError for a list or tuple (there is no memory to update in
    place) and for unsupported objects or element types, ValueError for
    read-only, non-contiguous or empty buffers; each message names the index.
    """
    where = f"gradient buffer {index} ({_describe(data)})"
    if isinstance(data, (list, tuple)):
        raise TypeError(
            f"{where}: the reducer writes the means into the caller's buffers "
            f"in place, so a {type(data).__name__} (which it could only copy) "
            f"is not accepted; {_REDUCER_ADVICE}"
        )
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{where} is not a buffer; {_REDUCER_ADVICE}") from None
    kind = _KINDS.get(_native_format(view))
    if kind is None or (kind, view.itemsize) not in _DTYPES:
        raise TypeError(
            f"{where} has the unsupported element format {view.format!r} "
            f"(item size {view.itemsize}); supported are float32, float64, "
            "int32 and int64 in native byte order"
        )
    if view.readonly:
        raise ValueError(f"{where} is read-only; the reducer writes into it")
    if not view.c_contiguous:
        raise ValueError(
            f"{where} is not C-contiguous (the reducer needs one flat block; "
            "copy it with numpy.ascontiguousarray and pass the copy)"
        )
    if view.nbytes == 0:
        raise ValueError(f"{where} is empty; every gradient buffer needs elements")
    return Buffer(data, writable=True)
