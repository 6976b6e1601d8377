"""``Reducer``: DistributedDataParallel-style gradient averaging over the
caller's own buffers, for frameworks that are not LibTorch (numpy code), or
over torch tensors (through DLPack, shapes included)."""

from __future__ import annotations

import collections.abc
import contextlib
import ctypes
import numbers
import operator
from typing import Any, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

from . import _dlpack, _lib
from ._closable import Closable
from ._comm_hook import CCommHook, HookTable, LentHook
from ._buffers import DTYPE_NAMES, reducer_buffer
from ._errors import InvalidArgumentError



class ReducerOwner(Protocol):
    """What a reducer needs of its ``ddpspawn.Context`` (a protocol, so that this module stays
    below ``_context``, which creates reducers)."""

    def _live(self) -> ctypes._Pointer[_lib.ContextHandle]: ...

    def _borrow(self, handle: ctypes._Pointer[_lib.ContextHandle]) -> Closable: ...

    def _adopt(self, reducer: "Reducer") -> None: ...

    def _forget(self, reducer: "Reducer") -> None: ...

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _positive_megabytes(name: str, value: Any) -> float:
    # operator.gt is value > 0: typeshed's numbers.Real declares __lt__ and __le__, not __gt__.
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not operator.gt(value, 0):
        raise InvalidArgumentError(f"{name} must be a positive number of megabytes, not {value!r}")
    return float(value)


def _int32(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{name} must be an int, not {value!r}")
    if not _INT32_MIN <= int(value) <= _INT32_MAX:
        raise InvalidArgumentError(f"{name} is out of range: {value!r}")
    return int(value)


def _comm_hook_name(value: Any) -> bytes:
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"comm_hook must be a hook's name (a str), a callable(context, bucket) or a "
            f"CCommHook, "
            f"not {value!r}"
        )
    if "\0" in value:
        raise InvalidArgumentError(f"comm_hook contains a NUL character: {value!r}")
    return value.encode()


class Reducer(Closable):
    """Averages a fixed set of gradient buffers across the ranks, DDP-style.

    Create it with :meth:`Context.reducer`. Each iteration: write the
    gradients into the buffers, call :meth:`mark_ready` for each one as it
    becomes final (any order; buckets of buffers, in reverse buffer order,
    start communicating in bucket order as they fill, overlapping with the
    rest of your backward pass), then :meth:`finalize`: afterwards every
    buffer holds the mean over the ranks. Every rank must create the reducer
    with the same buffer sizes and element types, in the same order, and run
    the same iterations.

    The buffers stay the caller's: the reducer reads and writes them in place
    and keeps a reference to each (and to the context), so they outlive it.
    Do not resize or reallocate them while the reducer is open (a torch
    gradient must stay the same tensor: zero it in place, not to None).

    Close it with :meth:`close` or a ``with`` block; it is also closed when
    garbage-collected, and when its context closes.
    """

    def __init__(
        self,
        context: ReducerOwner,
        buffers: Sequence[Any],
        *,
        bucket_cap_mb: Optional[float] = None,
        first_bucket_cap_mb: Optional[float] = None,
        comm_hook: Union[str, LentHook, CCommHook] = "allreduce",
        powersgd_rank: Optional[int] = None,
        powersgd_start_iteration: Optional[int] = None,
        find_unused_parameters: bool = False,
    ) -> None:
        self._handle: Optional[ctypes._Pointer[_lib.ReducerHandle]] = None
        self._hook_table: Optional[HookTable] = None
        # Everything is checked before the first C call.
        if isinstance(buffers, (str, bytes, bytearray, memoryview)) or not isinstance(
            buffers, collections.abc.Sequence
        ):
            raise TypeError(
                "buffers must be a sequence (e.g. a list) of gradient buffers, "
                f"not {type(buffers).__name__}"
            )
        if not buffers:
            raise InvalidArgumentError("the reducer needs at least one buffer")
        tensors = [_dlpack.is_tensor(data) for data in buffers]
        if any(tensors) and not all(tensors):
            raise TypeError(
                f"gradient buffer {tensors.index(not tensors[0])} is "
                f"{'not ' if tensors[0] else ''}a tensor, but buffer 0 "
                f"{'is' if tensors[0] else 'is not'}: pass tensors with __dlpack__ "
                "(torch) for every gradient, or buffers (numpy) for every one"
            )
        checked = [] if tensors[0] else [reducer_buffer(d, i) for i, d in enumerate(buffers)]
        options: _lib.ReducerOptions
        hook_table: Optional[HookTable] = None
        if isinstance(comm_hook, CCommHook) or callable(comm_hook):
            options = _lib.reducer_options_with_hook()
        else:
            options = _lib.reducer_options()
            options.comm_hook = _comm_hook_name(comm_hook)
        # None keeps the library's default (ddpspawn_defaults.h), which the options came with.
        if bucket_cap_mb is not None:
            options.bucket_cap_mb = _positive_megabytes("bucket_cap_mb", bucket_cap_mb)
        if first_bucket_cap_mb is not None:
            options.first_bucket_cap_mb = _positive_megabytes(
                "first_bucket_cap_mb", first_bucket_cap_mb
            )
        if powersgd_rank is not None:
            options.powersgd_rank = _int32("powersgd_rank", powersgd_rank)
        if powersgd_start_iteration is not None:
            options.powersgd_start_iteration = _int32(
                "powersgd_start_iteration", powersgd_start_iteration
            )
        options.find_unused_parameters = 1 if find_unused_parameters else 0

        c_hook_table: Optional[_lib.CommHookTable] = None
        if callable(comm_hook):  # a hook written in Python: the library calls it per bucket
            hook_table = HookTable(comm_hook, context._borrow)
            assert isinstance(options, _lib.ReducerOptionsWithHook)
            options.custom_comm_hook = ctypes.pointer(hook_table.table)
        try:
            if isinstance(comm_hook, CCommHook):  # a hook written in C: no Python per bucket
                c_hook_table = comm_hook.table()
                assert isinstance(options, _lib.ReducerOptionsWithHook)
                options.custom_comm_hook = ctypes.pointer(c_hook_table)
            handle, pointers, dtype_names = self._create(context, buffers, checked, options)
        except BaseException:
            # A failed creation leaves the C hook's state to its maker (ddpspawn.h).
            if c_hook_table is not None and c_hook_table.release and c_hook_table.user_data:
                c_hook_table.release(c_hook_table.user_data)
            raise
        self._lib = _lib.lib()
        self._context = context
        self._buffers: Tuple[Any, ...] = tuple(buffers)
        self._pointers = pointers
        self._dtypes = dtype_names
        self._comm_hook: Optional[Union[str, LentHook, CCommHook]] = comm_hook
        # The ctypes callbacks must outlive the C reducer, which may call them until destroyed.
        self._hook_table = hook_table
        self._sync = True
        self._handle = handle
        context._adopt(self)

    @staticmethod
    def _create(context: ReducerOwner, buffers: Sequence[Any], checked: List[Any],
                options: _lib.ReducerOptions) -> Tuple[Any, List[Any], Tuple[str, ...]]:
        """The C reducer over `buffers`, the objects that keep their memory, and their dtypes."""
        handle = _lib.ReducerPtr()
        lib = _lib.lib()
        count = len(buffers)
        pointers: List[Any]
        if checked:
            # The ctypes arrays hold a buffer export of each object: the memory
            # can neither be freed nor resized while they live.
            pointers = [b.shared() for b in checked]
            addresses = (ctypes.c_void_p * count)(*[ctypes.addressof(p) for p in pointers])
            counts = (ctypes.c_size_t * count)(*[b.count for b in checked])
            dtypes = (ctypes.c_int32 * count)(*[b.dtype for b in checked])
            _lib.check(
                lib.ddpspawn_reducer_create(
                    context._live(),
                    addresses,
                    counts,
                    dtypes,
                    count,
                    ctypes.byref(options),
                    ctypes.byref(handle),
                )
            )
            dtype_names = tuple(DTYPE_NAMES[b.dtype] for b in checked)
        else:
            # Each DLPack capsule keeps its tensor's memory alive while held.
            pointers = [_dlpack.Borrowed(data) for data in buffers]
            tensor_addresses = (ctypes.c_void_p * count)(*[p.pointer.value for p in pointers])
            _lib.check(
                lib.ddpspawn_reducer_create_dlpack(
                    context._live(),
                    tensor_addresses,
                    count,
                    ctypes.byref(options),
                    ctypes.byref(handle),
                )
            )
            dtype_names = tuple(str(data.dtype).replace("torch.", "") for data in buffers)
        return handle, pointers, dtype_names

    # -- lifetime ----------------------------------------------------------

    def close(self) -> None:
        """Destroys the reducer (``ddpspawn_reducer_destroy``) and lets go of
        the buffers. Safe to repeat."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.ddpspawn_reducer_destroy(handle)
            self._hook_table = None
            self._comm_hook = None  # a Python hook's objects go with the C reducer
            self._pointers = []
            self._buffers = ()
            self._context._forget(self)

    def __repr__(self) -> str:
        if self.closed:
            return "<ddpspawn.Reducer closed>"
        dtypes = sorted(set(self._dtypes))
        return (
            f"<ddpspawn.Reducer buffers={len(self._buffers)} "
            f"buckets={self.bucket_count} dtypes={','.join(dtypes)} "
            f"comm_hook={self._comm_hook!r} sync={self._sync}>"
        )

    def _live(self) -> ctypes._Pointer[_lib.ReducerHandle]:
        if self._handle is None:
            raise ValueError("operation on a closed ddpspawn.Reducer")
        return self._handle

    # -- what it holds -----------------------------------------------------

    @property
    def buffers(self) -> Tuple[Any, ...]:
        """The caller's buffer objects, in the order given."""
        self._live()
        return self._buffers

    def __len__(self) -> int:
        return len(self._buffers)

    @property
    def bucket_count(self) -> int:
        """The number of buckets the buffers were grouped into."""
        return int(self._lib.ddpspawn_reducer_bucket_count(self._live()))

    def buffers_in_buckets(self) -> List[Any]:
        """gradient_as_bucket_view: copies each buffer into its slot in its
        bucket once, and from then on reduces the slots. Returns one DLPack
        capsule per buffer over its slot (``torch.from_dlpack`` makes it a
        tensor of the buffer's shape and dtype; shared memory between a
        launcher's ranks): write each gradient there before marking it ready,
        and after finalize it holds the mean, with no copy either way. The
        buffers given at creation are not used again. Between iterations
        only; refused with ``find_unused_parameters``."""
        count = len(self._buffers)
        slots = (ctypes.c_void_p * count)()
        _lib.check(
            self._lib.ddpspawn_reducer_buffers_in_buckets_dlpack(self._live(), slots, count)
        )
        return [_dlpack.owned_capsule(slots[i]) for i in range(count)]

    @property
    def compression(self) -> Tuple[int, int]:
        """With ``comm_hook="powersgd"``: the elements its last compressed
        iteration sent, and the gradient elements they stood for (the first
        is smaller when it compressed); ``(0, 0)`` before
        ``powersgd_start_iteration`` and with the other hooks."""
        sent = ctypes.c_int64()
        dense = ctypes.c_int64()
        _lib.check(
            self._lib.ddpspawn_reducer_compression(
                self._live(), ctypes.byref(sent), ctypes.byref(dense)
            )
        )
        return sent.value, dense.value

    @property
    def sync(self) -> bool:
        """False inside :meth:`no_sync` (or after ``set_sync(False)``)."""
        return self._sync

    # -- one iteration -----------------------------------------------------

    def mark_ready(self, index: int) -> None:
        """Buffer ``index`` holds its final gradient for this iteration.

        Marking a buffer twice before :meth:`finalize` is a
        :class:`FailedPreconditionError`.
        """
        handle = self._live()
        _lib.check(self._lib.ddpspawn_reducer_mark_ready(handle, self._position(index)))

    def _position(self, index: Any) -> int:
        if isinstance(index, bool):
            raise InvalidArgumentError(f"buffer index must be an int, not {index!r}")
        try:
            position = operator.index(index)
        except TypeError:
            raise InvalidArgumentError(f"buffer index must be an int, not {index!r}") from None
        if not 0 <= position < len(self._buffers):
            raise InvalidArgumentError(
                f"buffer index {position} is outside [0, {len(self._buffers)})"
            )
        return position

    def finalize(self) -> None:
        """Starts the buckets still waiting (buffers never marked count as
        zeros, or are left untouched with ``find_unused_parameters``), waits
        for all of them, and writes the means into the buffers."""
        _lib.check(self._lib.ddpspawn_reducer_finalize(self._live()))

    def written(self, index: int) -> bool:
        """Whether the last :meth:`finalize` wrote the mean into buffer
        ``index``: False under :meth:`no_sync` and, with
        ``find_unused_parameters``, for a buffer that no rank marked (left
        as it was). True for a buffer this rank did not mark when another
        rank did: its mean arrived here too."""
        written = ctypes.c_int32()
        _lib.check(
            self._lib.ddpspawn_reducer_written(
                self._live(), self._position(index), ctypes.byref(written)
            )
        )
        return bool(written.value)

    def set_sync(self, enabled: bool) -> None:
        """``False`` is no_sync: :meth:`mark_ready` and :meth:`finalize`
        communicate nothing, so gradients accumulate locally; the first
        finalize after ``set_sync(True)`` averages what accumulated. Ranks
        that finalize different numbers of passes under no_sync are refused
        there (``ddpspawn_reducer_set_sync`` in ddpspawn.h)."""
        _lib.check(self._lib.ddpspawn_reducer_set_sync(self._live(), 1 if enabled else 0))
        self._sync = bool(enabled)

    @contextlib.contextmanager
    def no_sync(self, enabled: bool = True) -> Iterator["Reducer"]:
        """A ``with`` block of gradient accumulation without communication,
        like ``DistributedDataParallel.no_sync()``; the previous setting comes
        back on exit. ``enabled=False`` changes nothing, so that a conditional
        no_sync is one line: ``with reducer.no_sync(skip_sync):``."""
        previous = self._sync
        if enabled:
            self.set_sync(False)
        try:
            yield self
        finally:
            if not self.closed:
                self.set_sync(previous)
