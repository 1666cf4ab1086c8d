"""One shape for what holds llama.cpp memory: ``close()`` frees it once, ``with`` closes it, and collection closes
what was left open (best effort)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound="Closable")


class Closable:
    _closed = True  # until a subclass has loaded what it frees; set again by its close()

    @property
    def closed(self) -> bool:
        """Whether nothing is held: closed, or never loaded."""
        return self._closed

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
