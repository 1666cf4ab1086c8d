"""Each browser session's conversation and the messages waiting for their turn, so a message sent mid-reply
is never lost.

Send always appends to the session's queue. One reply loop per session (``claim``) answers the queue in
order; a message sent while it runs is picked up when the current reply ends. The conversation lives here, not
in an event's inputs, so a reply loop started later never works from an older copy of it. Clear bumps the
session's epoch: the loop drops the reply in progress and carries on from an empty conversation.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional


MAX_SESSIONS = 256  # idle conversations beyond this many are forgotten, oldest first


@dataclass
class _Session:
    pending: list = field(default_factory=list)  # (text, control values)
    history: list = field(default_factory=list)  # the conversation's messages
    owner: Optional[object] = None  # the running loop's claim
    epoch: int = 0
    live: list = field(default_factory=list)  # the message being answered and its reply so far (kept as it streams)


@dataclass
class Claim:
    key: str
    epoch: int
    cleared: bool = False  # set by ``next`` when Clear happened since the last message


class Sessions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, _Session] = {}

    def _get(self, key: str) -> _Session:
        s = self._by_key.pop(key, None) or _Session()
        self._by_key[key] = s  # most recently used last
        for old in [k for k, v in self._by_key.items() if v.owner is None and not v.pending][
                   :max(len(self._by_key) - MAX_SESSIONS, 0)]:
            del self._by_key[old]
        return s

    def history(self, key: str) -> list:
        with self._lock:
            return list(self._get(key).history)

    def set_history(self, key: str, messages: list) -> None:
        """The conversation; the reply streaming meanwhile (``live``) has ended, in it or dropped."""
        with self._lock:
            s = self._get(key)
            s.history, s.live = list(messages), []

    def set_live(self, key: str, messages: list) -> None:
        """The question being answered and its reply so far (what a reload mid-reply keeps)."""
        with self._lock:
            self._get(key).live = list(messages)

    def live(self, key: str) -> list:
        with self._lock:
            return list(self._get(key).live)

    def push(self, key: str, text: str, values: Any, front: bool = False) -> bool:
        """Queue a message; True when a reply loop is running (the message waits behind it)."""
        with self._lock:
            s = self._get(key)
            s.pending.insert(0, (text, values)) if front else s.pending.append((text, values))
            return s.owner is not None

    def active(self, key: str) -> bool:
        with self._lock:
            return self._get(key).owner is not None

    def queued(self, key: str) -> list[str]:
        with self._lock:
            return [text for text, _ in self._get(key).pending]

    def claim(self, key: str) -> Optional[Claim]:
        """Become the session's reply loop, unless one runs already or nothing is queued."""
        with self._lock:
            s = self._get(key)
            if s.owner is not None or not s.pending:
                return None
            claim = Claim(key, s.epoch)
            s.owner = claim
            return claim

    def next(self, claim: Claim) -> Optional[tuple[str, Any]]:
        """The next message for the loop, or None: the loop is released (atomically with the check, so a
        message queued at that moment either is returned here or finds no loop and starts one)."""
        with self._lock:
            s = self._get(claim.key)
            claim.cleared = s.epoch != claim.epoch
            claim.epoch = s.epoch
            if not s.pending:
                s.owner = None
                return None
            return s.pending.pop(0)

    def stale(self, claim: Claim) -> bool:
        """True when Clear was pressed since the loop took its message (drop the reply in progress)."""
        with self._lock:
            return self._get(claim.key).epoch != claim.epoch

    def give_back(self, claim: Claim) -> list[str]:
        """Release the loop and return the texts still queued (e.g. after Stop, back into the input box)."""
        with self._lock:
            s = self._get(claim.key)
            texts = [text for text, _ in s.pending]
            s.pending.clear()
            if s.owner is claim:
                s.owner = None
            return texts

    def release(self, claim: Claim) -> None:
        with self._lock:
            s = self._get(claim.key)
            if s.owner is claim:
                s.owner = None

    def clear(self, key: str) -> None:
        with self._lock:
            s = self._get(key)
            s.pending.clear()
            s.history, s.live = [], []
            s.epoch += 1


class Notes:
    """Per session: the status the reply loop showed last (what Stop answers with, so no late "Stopping…" can
    be left on screen) and the reply a Regenerate replaces (to say why it came back the same)."""

    LIMIT = MAX_SESSIONS * 2

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.replaced: dict[str, str] = {}

    def said(self, key: str, text: Any) -> None:
        """Remember ``text`` (a status; anything else, e.g. "no change", is ignored) as the session's latest."""
        if isinstance(text, str):
            self.status.pop(key, None)
            self.status[key] = text
            while len(self.status) > self.LIMIT:
                self.status.pop(next(iter(self.status)))
