"""The lifetime protocol shared by objects that own a C handle (Context, Reducer): `closed`,
use as a context manager, and closing on garbage collection. Subclasses set `self._handle` and
implement `close()`."""

from __future__ import annotations

from typing import Any, Optional, TypeVar

_Self = TypeVar("_Self", bound="Closable")


class Closable:
    """Closes `self._handle` deterministically (with) and on `__del__`."""

    _handle: Optional[object] = None

    def close(self) -> None:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing useful to do
            pass
