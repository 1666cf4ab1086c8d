"""A lock that hands itself to waiters in the order they asked (``threading.Lock`` promises no order).

The generation lock is one: UI tabs, ``/chat``, the OpenAI-compatible API and benchmarks wait for each other
first come, first served. Same interface as ``threading.Lock`` (``acquire(blocking, timeout)``, ``release``,
``locked``, ``with``), plus ``waiting``: how many threads are queued.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Iterator


class FifoLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque = deque()  # tickets of the waiting threads, oldest first
        self._held = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        with self._cond:
            if not self._held and not self._queue:
                self._held = True
                return True
            if not blocking:
                return False
            ticket = object()
            self._queue.append(ticket)
            deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
            try:
                while self._held or self._queue[0] is not ticket:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                self._held = True
                return True
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()  # the next in line re-checks whether it is first now

    def release(self) -> None:
        with self._cond:
            if not self._held:
                raise RuntimeError("release of an unheld FifoLock")
            self._held = False
            self._cond.notify_all()

    def locked(self) -> bool:
        return self._held

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class Readers:
    """Shared use of the loaded pair outside the generation lock (tokenising a prompt), excluded while the
    pair is swapped or freed: ``with readers.shared():`` beside ``with readers.exclusive():``."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._n = 0
        self._writer = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._n += 1
        try:
            yield
        finally:
            with self._cond:
                self._n -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True  # new readers wait from here on
            while self._n:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
