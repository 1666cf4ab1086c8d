"""Tokenisation in linear time: where a long text may be cut so that its pieces tokenise to the same ids.

llama.cpp splits a text at special tokens before tokenising (``tokenizer_st_partition`` in
src/llama-vocab.cpp) and walks its fragment list from the start for every match, so one call costs
O(matches x fragments): 80,000 one-word chat turns (160,000 markers) took 71 s. llama.cpp tokenises the
fragments between special tokens one by one anyway, so the text can be cut where a special token starts and
each piece tokenised alone: the ids are the same, and the cost is linear. A cut is made only where llama.cpp
itself would split: at a special token that no other special token's text overlaps (a longer one would be
matched first), and never before a token that strips the whitespace to its left (``LSTRIP``), whose left
neighbour depends on it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Union

Cancel = Optional[Union[threading.Event, Callable[[], bool]]]  # a set event or a True answer: stop


def cancelled(cancel: Cancel) -> bool:
    """Whether ``cancel`` (an Event, a callable or None) says stop."""
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())

CHUNK_CHARS = 1024  # the shortest piece: each llama.cpp call then holds a bounded number of special tokens

# llama_token_attr bits (include/llama.h)
ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_LSTRIP = 1 << 0, 1 << 3, 1 << 4, 1 << 7


@dataclass(frozen=True)
class Specials:
    """The texts llama.cpp splits on for one ``parse_special`` setting, indexed for matching at a position."""

    by_length: dict[int, frozenset[str]]
    lengths: tuple[int, ...]  # longest first, as llama.cpp matches them
    first: re.Pattern  # any first character of a special text
    lstrip: frozenset[str]

    def match_at(self, text: str, pos: int) -> int:
        """The length of the longest special text starting at ``pos``; 0 when none does."""
        for n in self.lengths:
            if text[pos:pos + n] in self.by_length[n]:
                return n
        return 0

    def overlapped(self, text: str, pos: int, n: int) -> bool:
        """Whether another special text overlaps ``text[pos:pos + n]`` (starting before it, or inside it)."""
        for m in self.lengths:
            texts = self.by_length[m]
            for start in range(max(0, pos - m + 1), pos + n):
                if start != pos and text[start:start + m] in texts:
                    return True
        return False


def specials(tokens: Iterable[tuple[str, int]], parse_special: bool) -> Optional[Specials]:
    """From (text, attributes) of every token: the texts llama.cpp partitions on (control, user-defined and
    unknown tokens; only user-defined ones without ``parse_special``), or None when there are none."""
    wanted = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN if parse_special else ATTR_USER_DEFINED
    by_length: dict[int, set[str]] = {}
    lstrip: set[str] = set()
    for text, attr in tokens:
        if text and attr & wanted:
            by_length.setdefault(len(text), set()).add(text)
            if attr & ATTR_LSTRIP:
                lstrip.add(text)
    if not by_length:
        return None
    firsts = {t[0] for texts in by_length.values() for t in texts}
    return Specials({n: frozenset(t) for n, t in by_length.items()}, tuple(sorted(by_length, reverse=True)),
                    re.compile("[" + "".join(re.escape(c) for c in sorted(firsts)) + "]"), frozenset(lstrip))


def vocab_specials(vocab, n_vocab: int, parse_special: bool) -> Optional[Specials]:
    """:func:`specials` of a loaded llama.cpp vocabulary (the attributes of every token, read once)."""
    import llama_cpp as L

    wanted = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN
    attrs = ((i, L.llama_vocab_get_attr(vocab, i)) for i in range(n_vocab))
    return specials((((L.llama_vocab_get_text(vocab, i) or b"").decode("utf-8", "surrogateescape"), a)
                     for i, a in attrs if a & wanted), parse_special)


def cut_points(text: str, sp: Optional[Specials], every: int = CHUNK_CHARS) -> list[int]:
    """Positions where ``text`` can be cut (each at least ``every`` characters after the last) so that its
    pieces, tokenised one by one, give the ids of the whole text."""
    cuts: list[int] = []
    if sp is None:
        return cuts
    pos = every
    while pos < len(text):
        found = sp.first.search(text, pos)
        if found is None:
            break
        at = found.start()
        n = sp.match_at(text, at)
        if n and text[at:at + n] not in sp.lstrip and not sp.overlapped(text, at, n):
            cuts.append(at)
            pos = at + every
        else:
            pos = at + 1
    return cuts


def pieces(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
