"""``Context``: one process's membership in the group, and its collectives."""

from __future__ import annotations

import ctypes
import os
import pickle
import weakref
from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

from . import _checkpoint, _dlpack, _lib
from ._closable import Closable
from ._arrivals import RankArrivals, StragglerReport
from ._buffers import Buffer
from ._comm_hook import Bucket, CCommHook
from ._errors import InvalidArgumentError
from ._reducer import Reducer

#: ``hook(context, bucket)``: averages ``bucket`` across the ranks of
#: ``context`` (the reducer's group, lent for the call) with any of its
#: collectives; what it returns is ignored.
CommHook = Callable[["Context", Bucket], Any]

_OPS = {
    "sum": _lib.SUM,
    "mean": _lib.MEAN,
    "min": _lib.MIN,
    "max": _lib.MAX,
    "product": _lib.PRODUCT,
}


def _op_code(op: str) -> int:
    try:
        return _OPS[op]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"unknown reduce op {op!r}; expected one of {', '.join(_OPS)}"
        ) from None


def _timeout_seconds(timeout: Optional[float]) -> float:
    if timeout is None:
        return 0.0
    if timeout <= 0:
        raise InvalidArgumentError(f"timeout must be positive or None, not {timeout!r}")
    return float(timeout)


def _take_bytes(pointer: ctypes.c_void_p, size: int) -> bytes:
    """Copies ``size`` bytes the library allocated, then frees them."""
    try:
        return ctypes.string_at(pointer, size) if size else b""
    finally:
        _lib.lib().ddpspawn_free(pointer)


class Context(Closable):
    """This process's place in the process group, with collectives.

    A ``Context`` joins the group described by the environment: a ddpspawn
    launcher, torchrun/TorchElastic, SLURM, or plain ``MASTER_ADDR``/
    ``MASTER_PORT``/``RANK``/``WORLD_SIZE`` variables (a group of one when none
    is set). Every collective must be called by every rank, in the same order.

    Close it with :meth:`close` or a ``with`` block; it is also closed when
    garbage-collected.

    Args:
        backend: "gloo" (CPU) or "nccl" (needs a CUDA build of LibTorch).
        timeout: seconds allowed for joining and for each collective; None
            for the library's default (1800).
    """

    _borrowed = False  # a comm hook's context (_borrow): the library owns the handle

    def __init__(self, backend: str = "gloo", timeout: Optional[float] = None) -> None:
        self._handle: Optional[ctypes._Pointer[_lib.ContextHandle]] = None
        # Open reducers use this context's process group: close() closes them first.
        self._reducers: "weakref.WeakSet[Reducer]" = weakref.WeakSet()
        if not isinstance(backend, str):
            raise InvalidArgumentError(f"backend must be a str, not {backend!r}")
        options = _lib.context_options()
        options.backend = backend.encode()
        options.timeout_s = _timeout_seconds(timeout)
        handle = _lib.ContextPtr()
        lib = _lib.lib()
        _lib.check(lib.ddpspawn_context_create(ctypes.byref(options), ctypes.byref(handle)))
        self._lib = lib
        self._handle = handle

    @classmethod
    def from_env(cls, backend: str = "gloo", timeout: Optional[float] = None) -> "Context":
        """Joins the group that the environment describes (see the class doc)."""
        return cls(backend=backend, timeout=timeout)

    @classmethod
    def _borrow(cls, handle: ctypes._Pointer[_lib.ContextHandle]) -> "Context":
        """A Context over a handle the library lends for one call (a comm
        hook's): closing it only forgets the handle, never destroys it."""
        context = cls.__new__(cls)
        context._reducers = weakref.WeakSet()
        context._lib = _lib.lib()
        context._borrowed = True
        context._handle = handle
        return context

    # -- lifetime ----------------------------------------------------------

    def close(self) -> None:
        """Leaves the group (``ddpspawn_context_destroy``), closing this
        context's open reducers first. Safe to repeat."""
        for reducer in list(getattr(self, "_reducers", ())):
            reducer.close()
        handle, self._handle = self._handle, None
        if handle is not None and not self._borrowed:
            self._lib.ddpspawn_context_destroy(handle)

    def _adopt(self, reducer: Reducer) -> None:
        self._reducers.add(reducer)

    def _forget(self, reducer: Reducer) -> None:
        self._reducers.discard(reducer)

    def __repr__(self) -> str:
        if self.closed:
            return "<ddpspawn.Context closed>"
        return (
            f"<ddpspawn.Context rank={self.rank} world_size={self.world_size} "
            f"environment={self.environment!r}>"
        )

    def _live(self) -> ctypes._Pointer[_lib.ContextHandle]:
        if self._handle is None:
            raise ValueError("operation on a closed ddpspawn.Context")
        return self._handle

    # -- where this process stands ----------------------------------------

    @property
    def rank(self) -> int:
        """Global rank of this process, 0 .. world_size - 1."""
        return int(self._lib.ddpspawn_context_rank(self._live()))

    @property
    def world_size(self) -> int:
        """Number of processes in the group."""
        return int(self._lib.ddpspawn_context_world_size(self._live()))

    @property
    def local_rank(self) -> int:
        """Rank among the processes on this node."""
        return int(self._lib.ddpspawn_context_local_rank(self._live()))

    @property
    def local_world_size(self) -> int:
        """Number of processes on this node."""
        return int(self._lib.ddpspawn_context_local_world_size(self._live()))

    @property
    def node_rank(self) -> int:
        """Index of this node."""
        return int(self._lib.ddpspawn_context_node_rank(self._live()))

    @property
    def environment(self) -> str:
        """The detected cluster environment: "ddpspawn", "torchelastic", "slurm" or "env"."""
        environment: bytes = self._lib.ddpspawn_context_environment(self._live())  # never NULL
        return environment.decode()

    def straggler_report(self) -> StragglerReport:
        """Which rank arrived last at this group's collectives so far, and by
        how much (see :class:`StragglerReport`). Unlike the other methods it
        may be called from another thread while a collective runs."""
        measured = ctypes.c_int32()
        collectives = ctypes.c_int64()
        straggler = ctypes.c_int32()
        summary = ctypes.c_char_p()
        handle = self._live()
        _lib.check(
            self._lib.ddpspawn_context_straggler(
                handle,
                ctypes.byref(measured),
                ctypes.byref(collectives),
                ctypes.byref(straggler),
                ctypes.byref(summary),
            )
        )
        ranks = []
        for rank in range(self.world_size):
            last = ctypes.c_int64()
            late = ctypes.c_double()
            waited = ctypes.c_double()
            _lib.check(
                self._lib.ddpspawn_context_rank_arrivals(
                    handle, rank, ctypes.byref(last), ctypes.byref(late), ctypes.byref(waited)
                )
            )
            ranks.append(RankArrivals(last.value, late.value, waited.value))
        return StragglerReport(
            measured=bool(measured.value),
            collectives=collectives.value,
            straggler=straggler.value,
            summary=(summary.value or b"").decode(),
            ranks=ranks,
        )

    # -- collectives -------------------------------------------------------

    def barrier(self, name: Optional[str] = None) -> None:
        """Waits until every rank reached the barrier of this name."""
        encoded = None if name is None else name.encode()
        _lib.check(self._lib.ddpspawn_barrier(self._live(), encoded))

    def broadcast(self, data: Any, src: int = 0) -> Any:
        """Overwrites ``data`` on every rank with ``src``'s (in place for buffers).

        Returns the data: a new list for a list, else ``data`` itself.
        """
        if _dlpack.is_tensor(data):
            tensor = _dlpack.Borrowed(data)
            _lib.check(self._lib.ddpspawn_broadcast_dlpack(self._live(), tensor.pointer, src))
            return data
        buffer = Buffer(data, writable=True)
        _lib.check(
            self._lib.ddpspawn_broadcast(
                self._live(), buffer.pointer(), buffer.count, buffer.dtype, src
            )
        )
        return buffer.result()

    def all_reduce(self, data: Any, op: str = "sum") -> Any:
        """Every rank ends with ``op`` ("sum", "mean", "min", "max", "product")
        over all ranks' ``data``.

        Buffers (``array.array``, numpy arrays, memoryviews) are reduced in
        place and returned; a list gives a new list (int64 when every element
        is an int, else float64). Integer "mean" truncates toward zero.
        Tensors with ``__dlpack__`` (torch, on CPU or, with nccl, CUDA) are
        reduced in place without a copy and returned.
        """
        code = _op_code(op)
        if _dlpack.is_tensor(data):
            tensor = _dlpack.Borrowed(data)
            _lib.check(self._lib.ddpspawn_all_reduce_dlpack(self._live(), tensor.pointer, code))
            return data
        buffer = Buffer(data, writable=True)
        _lib.check(
            self._lib.ddpspawn_all_reduce(
                self._live(), buffer.pointer(), buffer.count, buffer.dtype, code
            )
        )
        return buffer.result()

    def reduce(self, data: Any, op: str = "sum", dst: int = 0) -> Any:
        """Like :meth:`all_reduce`, but only rank ``dst`` gets the result;
        the other ranks' data is left as it was."""
        code = _op_code(op)
        if _dlpack.is_tensor(data):
            tensor = _dlpack.Borrowed(data)
            _lib.check(
                self._lib.ddpspawn_reduce_dlpack(self._live(), tensor.pointer, code, dst)
            )
            return data
        buffer = Buffer(data, writable=True)
        _lib.check(
            self._lib.ddpspawn_reduce(
                self._live(), buffer.pointer(), buffer.count, buffer.dtype, code, dst
            )
        )
        return buffer.result()

    def all_gather(self, data: Any) -> List[Any]:
        """Every rank's ``data``, in rank order, as new objects of its kind.

        ``data`` must have the same element type and count on every rank; it
        is only read, so read-only and non-contiguous buffers are fine. A
        tensor with ``__dlpack__`` (contiguous) gives views of one new tensor
        of shape ``[world_size, *data.shape]``.
        """
        if _dlpack.is_tensor(data):
            source = _dlpack.Borrowed(data)
            output = _dlpack.gather_output(data, self.world_size)
            target = _dlpack.Borrowed(output)
            _lib.check(
                self._lib.ddpspawn_all_gather_dlpack(self._live(), source.pointer, target.pointer)
            )
            return _dlpack.split(output, self.world_size)
        buffer = Buffer(data, writable=False)
        out, split = buffer.gather_output(self.world_size)
        _lib.check(
            self._lib.ddpspawn_all_gather(
                self._live(), buffer.pointer(), buffer.count, buffer.dtype, out
            )
        )
        return split()

    def reduce_scatter(self, output: Any, input: Any, op: str = "sum") -> Any:
        """torch.distributed's ``reduce_scatter_tensor``: ``input`` holds
        ``world_size`` equal chunks in rank order, and ``output`` (a
        ``world_size``-th of its elements, same dtype and device) gets chunk
        ``rank`` of ``op`` over every rank's ``input``. Both are tensors with
        ``__dlpack__`` (torch, on CPU or, with nccl, CUDA; numpy), contiguous;
        ``input`` is not changed. Returns ``output``.
        """
        if not (_dlpack.is_tensor(output) and _dlpack.is_tensor(input)):
            raise TypeError(
                "reduce_scatter takes tensors with __dlpack__ (torch, numpy), not "
                f"{type(output).__name__} and {type(input).__name__}"
            )
        code = _op_code(op)
        source = _dlpack.Borrowed(input)
        target = _dlpack.Borrowed(output)
        _lib.check(
            self._lib.ddpspawn_reduce_scatter_dlpack(
                self._live(), source.pointer, target.pointer, code
            )
        )
        return output

    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"],
                        tensors: Mapping[str, Any], step: int = 0) -> None:
        """Collective (every rank calls it): rank 0 writes ``tensors`` (a mapping
        of names to tensors with ``__dlpack__``, e.g. ``module.state_dict()``)
        and ``step`` to ``path`` as a checkpoint in the Trainer's format,
        atomically, and every rank returns, or raises, rank 0's outcome. The
        other ranks' tensors are not read (they may pass ``{}``). No optimizer
        state: ``ddpspawn fit --resume-from`` refuses the file; ``export``,
        :func:`ddpspawn.torch.load_weights` and :func:`ddpspawn.load_checkpoint`
        read it."""
        _checkpoint.save(self._lib, self._live(), path, tensors, step)

    def log_metrics(self, directory: Union[str, "os.PathLike[str]"],
                    values: Mapping[str, float], step: int, epoch: int = 0) -> None:
        """Lightning's ``log_dict`` for a loop of one's own: on rank 0, makes
        ``directory`` where missing and appends a row per value to its
        ``metrics.csv``, the Trainer's CSV logger's file
        (``epoch,step,name,value``); the other ranks write nothing. A name that
        is empty or holds a comma, a quote or a line break is
        :class:`InvalidArgumentError` on every rank, and no row is written."""
        names = list(values)
        c_names = (ctypes.c_char_p * max(len(names), 1))(*[str(n).encode() for n in names])
        numbers = (ctypes.c_double * max(len(names), 1))(*[float(values[n]) for n in names])
        _lib.check(self._lib.ddpspawn_log_metrics(
            self._live(), os.fsencode(directory), epoch, step, c_names, numbers, len(names)))

    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        """Returns ``src``'s ``obj`` on every rank (pickled, at most 1 GiB;
        ``obj`` is ignored on the other ranks). On ``src`` it returns ``obj``
        itself."""
        is_src = self.rank == src
        payload = pickle.dumps(obj) if is_src else b""
        out = ctypes.c_void_p()
        size = ctypes.c_size_t()
        _lib.check(
            self._lib.ddpspawn_broadcast_bytes(
                self._live(),
                payload,
                len(payload),
                src,
                ctypes.byref(out),
                ctypes.byref(size),
            )
        )
        received = _take_bytes(out, size.value)
        return obj if is_src else pickle.loads(received)

    def reducer(
        self,
        buffers: Sequence[Any],
        *,
        bucket_cap_mb: Optional[float] = None,
        first_bucket_cap_mb: Optional[float] = None,
        comm_hook: Union[str, CommHook, CCommHook] = "allreduce",
        powersgd_rank: Optional[int] = None,
        powersgd_start_iteration: Optional[int] = None,
        find_unused_parameters: bool = False,
    ) -> Reducer:
        """A :class:`Reducer` that averages ``buffers`` across the ranks, DDP-style.

        Args:
            buffers: the gradient buffers, in parameter order: writable,
                C-contiguous numpy arrays, ``array.array`` or memoryviews of
                float32, float64, int32 or int64; or torch tensors (anything
                with ``__dlpack__``), which keep their shapes. Not lists: the
                means are written into the buffers in place. Every rank passes
                the same sizes and types.
            bucket_cap_mb: size cap of a bucket, in MiB. This and the other
                numbers given None take the library's defaults
                (``ddpspawn_defaults.h``).
            first_bucket_cap_mb: size cap of the first bucket (the buffers at
                the end of the list), so communication starts early.
            comm_hook: "allreduce", "fp16" or "bf16" (compressed; lossy), or
                "powersgd" (low rank with error feedback; only matrices
                compress: tensors of two or more dimensions, while flat
                buffers are sent as they are; see ``Reducer.compression``),
                or "batched_powersgd" (each bucket as one square matrix, so
                flat buffers compress too); or a hook written in Python, a
                callable ``hook(context, bucket)`` that leaves the mean over
                the ranks in ``bucket.data`` (a :class:`ddpspawn.Bucket`),
                with any collectives of ``context`` (the reducer's group,
                lent for the call); an exception it raises fails the reducer
                call that ran it, naming the rank, the bucket and the
                exception. It runs in Python for every bucket, on the thread
                that marks or finalizes; CPU buffers only; it must not call
                its own reducer (which holds its lock during the call).
                Or a hook written in C (:class:`ddpspawn.CCommHook`): the
                same, with no Python per bucket.
            powersgd_rank: PowerSGD's matrix approximation rank.
            powersgd_start_iteration: PowerSGD runs plain all-reduce before it.
            find_unused_parameters: True leaves a buffer that no rank marked
                ready in an iteration untouched (one extra small all-reduce per
                iteration); False counts unmarked buffers as zeros.
        """
        return Reducer(
            self,
            buffers,
            bucket_cap_mb=bucket_cap_mb,
            first_bucket_cap_mb=first_bucket_cap_mb,
            comm_hook=comm_hook,
            powersgd_rank=powersgd_rank,
            powersgd_start_iteration=powersgd_start_iteration,
            find_unused_parameters=find_unused_parameters,
        )

    def all_gather_object(self, obj: Any) -> List[Any]:
        """Every rank's ``obj`` (pickled, at most 1 GiB each), in rank order."""
        world_size = self.world_size
        payload = pickle.dumps(obj)
        out = ctypes.c_void_p()
        sizes = (ctypes.c_size_t * world_size)()
        _lib.check(
            self._lib.ddpspawn_all_gather_bytes(
                self._live(), payload, len(payload), ctypes.byref(out), sizes
            )
        )
        data = _take_bytes(out, sum(sizes))
        objects, offset = [], 0
        for size in sizes:
            objects.append(pickle.loads(data[offset : offset + size]))
            offset += size
        return objects
