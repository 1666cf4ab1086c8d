"""Proposers: whatever suggests the next tokens for the target to verify, behind one small protocol.

A proposer sees the whole token history (prompt + accepted output) and returns up to ``k`` draft tokens with,
when it has them, the distributions ``q`` they were drawn from (needed by exact rejection sampling; ``None``
means a deterministic proposal, ``q = onehot``). It keeps whatever cache it has in sync with the history by
itself, so the decode loop never has to know what kind of proposer it drives. New kinds (cross-tokenizer,
tree) implement the same three methods. A proposer that sets ``couples = True`` also takes ``noise`` (the
coupled rule's Gumbel noise, coupled.py) and samples with it; the others' proposals count as deterministic. One
with ``retest_tokens`` has a pause on its acceptance re-tested at the start of every generation, until that many
of its tokens were judged (``DraftLength.retest``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from app.engine.decoding.sampling import SamplerSettings


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: Optional[list[np.ndarray]] = None  # one distribution per token, or None (deterministic)
    probs: list[Optional[float]] = field(default_factory=list)  # proposer's confidence per token, for display
    seconds: float = 0.0
    synced: int = 0  # history tokens the proposer had to catch up on before drafting (1 in steady state)
    t_sync: float = 0.0  # of ``seconds``: the catch-up on those tokens (a one-off, not a per-token cost)
    lookup: int = 0  # the first ``lookup`` tokens came from prompt lookup (provenance), the rest from a model …
    tail: int = 0  # … but the last ``tail``: prompt lookup took over from the model (a handoff, duo.py)

    def from_lookup(self, i: int) -> bool:
        """Whether token ``i`` came from prompt lookup."""
        return i < self.lookup or i >= len(self.tokens) - self.tail

    def lookup_kept(self, n: int) -> int:
        """Of the first ``n`` tokens (those the target kept), how many came from prompt lookup."""
        return min(n, self.lookup) + max(0, n - (len(self.tokens) - self.tail))


def end_of_reply(tokens: Sequence[int], is_eog: Callable[[int], bool]) -> Optional[int]:
    """How many of ``tokens`` run through the first end-of-generation token (the reply ends there if the target
    keeps it: nothing after it can be emitted); None without one."""
    return next((i + 1 for i, tok in enumerate(tokens) if is_eog(tok)), None)


class Proposer(Protocol):
    name: str

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        """A new generation starts from ``prompt``. ``warm``: prefill caches now (False while speculation is
        paused; ``propose`` must then catch up by itself)."""

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool) -> Draft:
        """Up to ``k`` tokens to follow ``history``. ``sample``: draw from q (rejection sampling) rather
        than take the most likely token."""

    def close(self) -> None:
        """Free what the proposer holds."""
