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


class CCommHook:
    """A communication hook written in C, from a shared library: the reducer calls its functions
    for every bucket with no Python in between (the C ABI's ``ddpspawn_comm_hook``; ``ddpspawn.h``
    says what each must do). ``start`` (and ``wait``, ``release``, ``make_user_data``, each
    optional) are names of functions the library exports::

        ddpspawn_status start(void* user_data, ddpspawn_context* context,
                              const ddpspawn_bucket* bucket, void** out_work);
        ddpspawn_status wait(void* user_data, ddpspawn_context* context, void* work);
        void release(void* user_data);   /* once, when the reducer is destroyed */
        void* make_user_data(void);      /* once per reducer: the hook's state */

    Give it as ``comm_hook=`` to :meth:`Context.reducer` or ``ddpspawn.torch.DistributedDataParallel``.
    It holds only the library's path and the names, so it pickles into spawned ranks; each rank
    loads the library (which may link ``libddpspawn.so.1`` for ddpspawn's collectives: the one
    already loaded serves it) and makes its own state. Like a hook written in Python, it runs on
    buckets in CPU memory only.
    """

    def __init__(self, library: str, start: str, *, wait: Optional[str] = None,
                 release: Optional[str] = None, make_user_data: Optional[str] = None) -> None:
        for name, value in (("library", library), ("start", start)):
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"CCommHook: {name} must be a non-empty str, "
                                           f"not {value!r}")
        for name, optional in (("wait", wait), ("release", release),
                               ("make_user_data", make_user_data)):
            if optional is not None and (not isinstance(optional, str) or not optional):
                raise InvalidArgumentError(f"CCommHook: {name} must be a function's name (a "
                                           f"non-empty str) or None, not {optional!r}")
        self.library = library
        self.start = start
        self.wait = wait
        self.release = release
        self.make_user_data = make_user_data

    def __repr__(self) -> str:
        return f"<ddpspawn.CCommHook {self.start} in {self.library}>"

    def table(self) -> "_lib.CommHookTable":
        """The ``ddpspawn_comm_hook`` for one reducer: the library loaded (once per process), the
        functions looked up, and a fresh state from ``make_user_data``. Errors name the library
        and the function."""
        try:
            library = ctypes.CDLL(self.library)
        except OSError as error:
            raise InvalidArgumentError(f"CCommHook: cannot load {self.library}: {error}") from None

        def function(name: str, kind: Any) -> Any:
            try:
                return ctypes.cast(getattr(library, name), kind)
            except AttributeError:
                raise InvalidArgumentError(
                    f"CCommHook: {self.library} exports no function {name!r}") from None

        # Every function is found before the state is made, which then goes to the table only.
        table = _lib.CommHookTable(
            struct_size=ctypes.sizeof(_lib.CommHookTable),
            user_data=None,
            start=function(self.start, _lib.CommHookStart),
            wait=(function(self.wait, _lib.CommHookWait) if self.wait is not None
                  else _lib.CommHookWait()),
            release=(function(self.release, _lib.CommHookRelease) if self.release is not None
                     else _lib.CommHookRelease()),
        )
        if self.make_user_data is not None:
            make = function(self.make_user_data, ctypes.CFUNCTYPE(ctypes.c_void_p))
            table.user_data = make()
            if table.user_data is None:
                raise InvalidArgumentError(
                    f"CCommHook: {self.make_user_data}() in {self.library} returned NULL")
        return table
