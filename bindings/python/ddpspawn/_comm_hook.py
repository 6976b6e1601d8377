"""Communication hooks written in Python: a callable averages each bucket of a
:class:`Reducer` in place of the built-in hooks, through the C ABI's
``ddpspawn_comm_hook`` (give it as ``comm_hook=`` to :meth:`Context.reducer`
or ``ddpspawn.torch.DistributedDataParallel``)."""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional, cast

from . import _lib
from ._closable import Closable
from ._errors import InvalidArgumentError, status_of

# ddpspawn dtype code -> (name, memoryview format, itemsize).
_FORMATS = {
    _lib.FLOAT32: ("float32", "f", 4),
    _lib.FLOAT64: ("float64", "d", 8),
    _lib.INT32: ("int32", "i", 4),
    _lib.INT64: ("int64", "q", 8),
}


class Bucket:
    """One bucket: some of the reducer's gradients, back to back.

    ``data`` is a writable memoryview of the reducer's memory, of ``dtype``
    elements (``numpy.frombuffer(bucket.data, dtype=bucket.dtype)`` and
    ``torch.frombuffer`` view it without a copy). It is valid only during the
    hook's call: when the hook returns, it must hold the mean over the ranks
    (or what the hook's compression makes of it). Buckets come in ``index``
    order on every rank, ``bucket_count`` of them per iteration.
    """

    __slots__ = ("index", "bucket_count", "dtype", "data")

    def __init__(self, index: int, bucket_count: int, dtype: str, data: memoryview) -> None:
        self.index = index
        self.bucket_count = bucket_count
        self.dtype = dtype
        self.data = data

    def __repr__(self) -> str:
        return (
            f"<ddpspawn.Bucket index={self.index} of {self.bucket_count} "
            f"dtype={self.dtype} len={len(self.data)}>"
        )


#: ``hook(context, bucket)`` as this module sees it: the context is whatever
#: the reducer's ``borrow`` lends (a ``ddpspawn.Context``; ``_context.CommHook``
#: names it, this module being below ``_context``).
LentHook = Callable[[Any, Bucket], Any]


class HookTable:
    """The C table of a Python hook. The Reducer that uses it holds it (and
    with it the ctypes callback and the hook) until the library has destroyed
    the C reducer, so the table needs no ``release``."""

    def __init__(
        self, hook: LentHook, borrow: Callable[[ctypes._Pointer[_lib.ContextHandle]], Closable]
    ) -> None:
        # borrow: Context._borrow, given by the reducer (this module is below _context).
        self._borrow = borrow
        self._hook = hook
        self._start = _lib.CommHookStart(self._run)
        self.table = _lib.CommHookTable(
            struct_size=ctypes.sizeof(_lib.CommHookTable),
            user_data=None,
            start=self._start,
            wait=_lib.CommHookWait(),  # NULL: the averaging ends in start
            release=_lib.CommHookRelease(),  # NULL
        )

    def _run(
        self,
        _user_data: Optional[int],
        context: ctypes._Pointer[_lib.ContextHandle],
        bucket: ctypes._Pointer[_lib.BucketStruct],
        _out_work: Any,
    ) -> int:
        # Nothing may escape a ctypes callback (ctypes would print it and
        # return 0, which the reducer reads as success): every failure becomes
        # a status and ddpspawn_set_last_error's message.
        try:
            view = bucket.contents
            if view.dtype not in _FORMATS:
                raise InvalidArgumentError(f"a bucket of unknown dtype code {view.dtype}")
            name, fmt, itemsize = _FORMATS[view.dtype]
            raw = (ctypes.c_char * (view.count * itemsize)).from_address(view.data)
            lent = self._borrow(context)
            # Any: typeshed types cast() per literal format, and fmt is one of four.
            data: memoryview = cast(Any, memoryview(raw).cast("B")).cast(fmt)
            try:
                self._hook(lent, Bucket(view.index, view.bucket_count, name, data))
            finally:
                lent.close()  # later use is a clear error, not a dangling handle
                try:
                    data.release()  # likewise for the bucket's view ...
                except BufferError:
                    pass  # ... unless the hook still holds an export of it (numpy.frombuffer)
            return _lib.OK
        except BaseException as error:  # noqa: B902 - everything ends here, KeyboardInterrupt too
            return _report(error)


def _report(error: BaseException) -> int:
    """The status for `error`, with its message set as the library's last
    error. Never raises (a failure here falls back to a fixed message)."""
    code = _lib.ERR_INTERNAL
    try:
        code = status_of(error)
        message = f"{type(error).__name__}: {error}".replace("\0", " ")
        _lib.lib().ddpspawn_set_last_error(code, message.encode("utf-8", "replace"))
    except BaseException:  # noqa: B902 - a broken __str__, MemoryError, a second Ctrl-C
        try:
            _lib.lib().ddpspawn_set_last_error(code, b"the Python comm hook failed")
        except BaseException:  # noqa: B902
            pass
    return code
