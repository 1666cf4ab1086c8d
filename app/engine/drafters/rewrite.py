"""Lookup through an edit: where the reply broke off a copy and later rejoined it, the span of the source it
replaced and what it wrote instead (a rename: ``tmp`` → ``line_count``), applied to lookup's later
continuations of the same source, so the next occurrence is proposed as the reply will write it.

A lookup proposal that the target rejected at its ``r``-th token leaves a *break*: the source position of that
token and the reply position where the target went its own way. When a later step's longest match aligns the
reply's tail with the source again, the match's start in the source and in the reply close the two spans:
``source[break.src : match_start]`` was replaced by ``reply[break.reply : reply_match_start]``. Both spans must
be short (``MAX_SPAN``) and the match must resume the same stretch of source after the break, else the break is
dropped. The rewritten tokens are still lookup's proposals — deterministic functions of the history — and are
verified like any other, so output is unchanged; only what is proposed changes.

References: Saxena 2023, prompt lookup decoding; Oliaro et al. 2024, SuffixDecoding (arXiv:2411.04975).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

MAX_SPAN = 16  # the longest source span, and reply span, a rewrite pairs
STALE = 48  # a break not closed within this many reply tokens is dropped
MAX_PAIRS = 64  # pairs kept per reply (the oldest go first)


@dataclass(frozen=True)
class Break:
    src: int  # the index position of the source token the reply did not copy
    reply: int  # the history position where the reply went its own way


@dataclass
class Rewrites:
    """What this reply replaced, as (source span → reply span), and the break not yet closed."""

    subs: dict = field(default_factory=dict, init=False)  # source span -> reply span, oldest first (``_pair``)
    pending: Optional[Break] = field(default=None, init=False)
    # derived from ``subs`` by ``_pair``: first token -> the source spans starting with it, longest first
    _by_first: dict = field(default_factory=dict, init=False, repr=False)

    def reset(self) -> None:
        self.subs.clear()
        self._by_first.clear()
        self.pending = None

    def broke(self, src: int, reply: int) -> None:
        self.pending = Break(src, reply)

    def realign(self, span, history: Sequence[int], match_start: int, match_length: int) -> None:
        """A match of ``match_length`` tokens ending before source position ``match_start`` aligns the tail of
        ``history``: close the pending break if it resumes the source just after it. ``span(a, b)``: the index's
        tokens from position a to b."""
        b = self.pending
        if b is None:
            return
        src_end, reply_end = match_start - match_length, len(history) - match_length
        n_src, n_reply = src_end - b.src, reply_end - b.reply
        if 1 <= n_src <= MAX_SPAN and 1 <= n_reply <= MAX_SPAN:
            source, reply = tuple(span(b.src, src_end)), tuple(history[b.reply:reply_end])
            if source and source != reply:
                self._pair(source, reply)
            self.pending = None
        elif len(history) - b.reply > STALE or n_reply > MAX_SPAN:
            self.pending = None

    def _pair(self, source: tuple, reply: tuple) -> None:
        self.subs.pop(source, None)
        self.subs[source] = reply
        while len(self.subs) > MAX_PAIRS:
            del self.subs[next(iter(self.subs))]
        self._by_first = {}
        for span in sorted(self.subs, key=len, reverse=True):
            self._by_first.setdefault(span[0], []).append(span)

    def apply(self, tokens: Sequence[int], start: int, n: int) -> tuple[tuple, tuple]:
        """``tokens`` (a continuation beginning at source position ``start``) with each known source span
        replaced, at most ``n`` tokens; and each token's source position (None for a replacement's)."""
        if not self.subs:
            return tuple(tokens[:n]), tuple(range(start, start + min(len(tokens), n)))
        out: list = []
        pos: list = []
        i = 0
        while i < len(tokens) and len(out) < n:
            for source in self._by_first.get(tokens[i], ()):  # the longest span first
                if tuple(tokens[i:i + len(source)]) == source:
                    out.extend(self.subs[source])
                    pos.extend([None] * len(self.subs[source]))
                    i += len(source)
                    break
            else:
                out.append(tokens[i])
                pos.append(start + i)
                i += 1
        return tuple(out[:n]), tuple(pos[:n])
