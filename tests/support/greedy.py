"""Greedy speculative output against plain output, as the tests compare them.

On a CPU the two must be identical token for token. With layers on a GPU, llama.cpp's batched kernels (a verify
pass) and its one-token kernels (a plain step) round differently, so a near-tie can break the other way: on an
H100 the outputs parted at top-1/top-2 logit gaps of 0.004, 0.008 and 0.031, never at a clear choice. There a
divergence passes only at such a near-tie (the bench reports the same gap in its ``mismatches``).
"""

from __future__ import annotations

from typing import Optional, Sequence

from app.lab.bench import divergence
from app.testing import gpu_layers

NEAR_TIE = 0.1  # logits: well above the gaps seen on a GPU, far below a real choice


def verdict(parted: Optional[dict], offloaded: bool) -> Optional[str]:
    """Why two greedy outputs do not count as equal (``parted``: :func:`divergence`'s answer), or None."""
    if parted is None:
        return None
    where = f"parted at token {parted['position']} (top-1/top-2 logit gap {parted['gap']:.3g})"
    if not offloaded:
        return f"{where}; on the CPU greedy speculation must reproduce plain decoding exactly"
    return None if parted["gap"] < NEAR_TIE else f"{where}, not a near-tie (< {NEAR_TIE})"


def assert_same_greedy(pair, prompt: Sequence[int], plain: Sequence[int], spec: Sequence[int],
                       label: str = "") -> None:
    """Greedy ``spec`` equals ``plain`` (see the module docstring for a GPU's near-ties)."""
    if list(spec) == list(plain):
        return
    why = verdict(divergence(pair, prompt, plain, spec), gpu_layers() != 0)
    assert why is None, f"{label}: {why}" if label else why
