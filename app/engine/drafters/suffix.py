"""A suffix index over token streams for prompt lookup with a longer memory: the current context *and* the
earlier prompts and replies a pair has served, each a *document*.

What it answers: the longest earlier occurrence of the current context's tail (a suffix of the live
document), and the tokens that followed it. How (SuffixDecoding, Oliaro et al. 2024, keeps a suffix tree;
this is the same question answered with less memory, as prompt-lookup decoding does, Saxena 2023):

- every token is appended once to one flat ``array('i')`` (4 bytes a token; documents end with ``SEP``);
- an *anchor* index maps each token bigram to the latest ``CANDIDATES`` positions that follow it;
- a query takes the candidates of the tail's last bigram and extends each match backwards (at most
  ``MAX_MATCH`` tokens, never across a document's end), keeping the longest; ties go to the most recent.

Memory is bounded: when more than ``capacity`` tokens are held, the oldest finished documents are dropped
(down to three quarters of ``capacity``, so eviction is amortised) and the anchors rebuilt; the live document
is never dropped. ``nbytes`` reports what it holds.
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence

SEP = -1  # ends a document: no match extends across it, no continuation runs past it
CANDIDATES = 16  # latest occurrences kept per bigram
MAX_MATCH = 64  # a match is extended backwards at most this far (longer ones are simply "long")
DEFAULT_CAPACITY = 262_144  # tokens held at most (1 MiB of tokens, a few MiB with the anchors)


@dataclass(frozen=True)
class Match:
    """The tail of the live document matched ``length`` tokens ending just before ``start``; the tokens
    that followed there are ``tokens`` (up to the requested count, never past that document's end).
    ``earlier``: they are in an earlier document, not the live one."""

    length: int
    start: int
    tokens: tuple
    earlier: bool = False


class SuffixIndex:
    """Documents of tokens, appended incrementally, with longest-match lookup of the live document's tail."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 16:
            raise ValueError(f"capacity must be at least 16 tokens, not {capacity}")
        self.capacity = capacity
        self.clear()

    def clear(self) -> None:
        """Forget every document."""
        self._tokens = array("i")
        self._base = 0  # absolute position of _tokens[0] (positions stay valid across evictions)
        self._anchors: dict[int, deque] = {}  # bigram key -> absolute positions right after it
        self._docs: deque = deque()  # absolute start of each document (the last one is live)
        self.live_len = 0  # tokens of the live document held
        self.live_offset = 0  # its first tokens dropped (only when it alone outgrew the capacity)
        self.evicted = 0  # documents dropped so far

    # --- building -----------------------------------------------------------------------------------------

    def start(self, tokens: Sequence[int] = ()) -> None:
        """End the live document (if it holds anything) and start a new one with ``tokens``."""
        if self.live_len:
            self._tokens.append(SEP)
            self._docs.append(self._end)
        elif not self._docs:
            self._docs.append(self._end)
        self.live_len = self.live_offset = 0
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the live document."""
        if not self._docs:
            self._docs.append(self._end)
        for tok in tokens:
            self._append(int(tok))
        if len(self._tokens) > self.capacity:
            self._evict()

    def sync(self, history: Sequence[int]) -> None:
        """Make the live document ``history``: append what it lacks (the usual case: it grew), or restart it
        when it no longer is a prefix of ``history``."""
        n = self.live_offset + self.live_len
        if n > len(history) or (self.live_len and self._tokens[-1] != history[n - 1]):
            self.start(history)
        else:
            self.extend(history[n:])

    def _append(self, tok: int) -> None:
        t = self._tokens
        if self.live_len >= 2:
            key = _key(t[-2], t[-1])
            slot = self._anchors.get(key)
            if slot is None:
                slot = self._anchors[key] = deque(maxlen=CANDIDATES)
            slot.append(self._end)
        t.append(tok)
        self.live_len += 1

    @property
    def _end(self) -> int:
        return self._base + len(self._tokens)

    def _evict(self) -> None:
        """Drop the oldest finished documents until at most 3/4 of capacity is held (the live document's
        oldest part too, if it alone is longer than that), then rebuild the anchors."""
        goal = self.capacity * 3 // 4
        while len(self._docs) > 1 and self._end - self._docs[0] > goal:
            self._docs.popleft()
            self.evicted += 1
        cut = self._docs[0]
        if self._end - cut > goal:  # the live document alone: keep its latest part
            cut = self._end - goal
            self.live_offset += cut - self._docs[0]
            self.live_len -= cut - self._docs[0]
            self._docs[0] = cut
        del self._tokens[:cut - self._base]
        self._base = cut
        self._rebuild()

    def _rebuild(self) -> None:
        self._anchors = {}
        t, base = self._tokens, self._base
        for i in range(2, len(t)):
            a, b = t[i - 2], t[i - 1]
            if SEP in (a, b, t[i]):
                continue
            slot = self._anchors.get(_key(a, b))
            if slot is None:
                slot = self._anchors[_key(a, b)] = deque(maxlen=CANDIDATES)
            slot.append(base + i)

    # --- querying -----------------------------------------------------------------------------------------

    def longest(self, n: int, min_length: int = 2, after: Sequence[int] = (),
                live_only: bool = False) -> Optional[Match]:
        """The longest earlier occurrence (at least ``min_length`` tokens) of the live document's tail with
        a continuation, and up to ``n`` tokens of it; None if there is none. ``after``: tokens that would
        follow the live document (a draft not yet verified): the tail is theirs, they are not indexed.
        ``live_only``: only occurrences within the live document (the other documents are not searched)."""
        t, base = self._tokens, self._base
        live_start = self._docs[-1] if self._docs else base
        end = len(t)
        live = self.live_len + len(after)
        if live < 2 or n < 1:
            return None
        tail = list(t[end - min(self.live_len, MAX_MATCH + 1):]) + list(after) if after else t
        slot = self._anchors.get(_key(tail[-2], tail[-1]))
        if not slot:
            return None
        best_len, best_pos = 0, -1
        q = len(tail)
        for pos in reversed(slot):  # most recent first: ties keep the most recent
            if live_only and pos < live_start:
                break  # (older ones are older still)
            i = pos - base
            if i < 0 or i >= end:
                continue  # evicted, or the live tail itself (no continuation yet)
            length, limit = 2, min(MAX_MATCH, live, i)
            while length < limit and t[i - 1 - length] == tail[q - 1 - length]:
                length += 1
            if length > best_len:
                best_len, best_pos = length, i
                if length >= MAX_MATCH:
                    break
        if best_len < min_length:
            return None
        stop, cap = best_pos, min(end, best_pos + n)
        while stop < cap and t[stop] != SEP:
            stop += 1
        return Match(length=best_len, start=base + best_pos, tokens=tuple(t[best_pos:stop]),
                     earlier=base + best_pos < live_start)

    def span(self, a: int, b: int) -> list:
        """The tokens held at absolute positions ``a`` to ``b`` (those evicted are left out)."""
        lo, hi = max(a - self._base, 0), max(min(b - self._base, len(self._tokens)), 0)
        return [t for t in self._tokens[lo:hi] if t != SEP]

    # --- size ---------------------------------------------------------------------------------------------

    @property
    def n_tokens(self) -> int:
        return len(self._tokens)

    @property
    def n_documents(self) -> int:
        return len(self._docs)

    def nbytes(self) -> int:
        """Bytes held: the token array, the anchor dict, its keys and its position deques."""
        size = sys.getsizeof(self._tokens) + sys.getsizeof(self._anchors) + sys.getsizeof(self._docs)
        for key, slot in self._anchors.items():
            size += sys.getsizeof(key) + sys.getsizeof(slot) + sum(sys.getsizeof(p) for p in slot)
        return size


def _key(a: int, b: int) -> int:
    return (a << 32) | (b & 0xFFFFFFFF)
