"""The common prefix of two token sequences: what a cache keeps when it is synced to a new sequence."""

from __future__ import annotations

from typing import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix, by bisection on slice equality (C-speed compares)."""
    a, b = list(a), list(b)
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # invariant: a[:lo] == b[:lo] and a[:hi+1] != b[:hi+1]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
