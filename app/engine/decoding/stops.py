"""Stop strings over generated text: where the first one begins, and how much of the text's end could still
become one (not safe to hand out yet). Pure string functions, shared by the API's stop strings and the infill
rules (``infillcut.py``)."""

from __future__ import annotations

from typing import Optional, Sequence


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> Optional[int]:
    """Index of the earliest stop string in ``text`` at or after ``start`` (None if there is none)."""
    hits = [i for i in (text.find(s, start) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


def held_back(text: str, stops: Sequence[str]) -> int:
    """How many characters at the end of ``text`` could still become a stop string (not safe to send yet)."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best
