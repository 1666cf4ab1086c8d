"""Proposers: whatever suggests the next tokens for the target to verify, behind one small protocol.

A proposer sees the whole token history (prompt + accepted output) and returns up to ``k`` draft tokens with,
when it has them, the distributions ``q`` they were drawn from (needed by exact rejection sampling; ``None``
means a deterministic proposal, ``q = onehot``). It keeps whatever cache it has in sync with the history by
itself, so the decode loop never has to know what kind of proposer it drives. New kinds (cross-tokenizer,
tree) implement ``begin``, ``propose`` and ``close``; the optional abilities are declared in the protocol with
the answer of a proposer that lacks them, which :class:`ProposerBase` gives:

- ``couples``: it also takes ``noise`` (the coupled rule's Gumbel noise, coupled.py) and samples with it; the
  others' proposals count as deterministic;
- ``retest_tokens``: a pause on its acceptance is re-tested at the start of every generation, until that many
  of its tokens were judged (``DraftLength.retest``);
- ``mixes``: it chooses its drafter per step (duo.py): the loop offers it the controller's whole ceiling,
  ``bind`` hands it the generation's controller and ``finish`` the reply's last tokens;
- ``time_tokens``: the seconds ``k`` draft decodes take, timed without proposing (the controller re-measures a
  sleeping draft's cost); a proposer with no model to time answers 0.0;
- ``catch_up``: how much of the history it has not seen, and what reading it would cost before it drafts (a
  draft model's catch-up: the prompt at a generation's start, lookup's stretch after it), which the controller
  weighs against what drafting can save in the tokens left (``DraftLength.hold``); a proposer that reads nothing
  answers (0, 0.0).

:class:`DraftSource` is what a model-driven proposer (draftmodel.py) needs of its model: the draft model
(``backend.Model``), the target's MTP head (mtp.py) and the assistant drafter (assistant.py) all have it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from app.engine.control.draftlen import DraftLength
from app.engine.decoding.tree import Sibling
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
    # lookup's first ``lookup`` / last ``tail`` tokens were copied from an earlier request's text, not this one's
    # (a copy never crosses a request's end, so each part has one source)
    earlier_head: bool = False
    earlier_tail: bool = False
    siblings: list[Sibling] = field(default_factory=list)  # a tree drafter's alternatives to tokens (tree.py)
    t_branches: float = 0.0  # of ``seconds``: drafting the siblings' tails (tails.py), not the chain's tokens

    @property
    def nodes(self) -> int:
        """The tokens a target pass verifies beside the pending one: the chain's, the siblings and their tails."""
        return len(self.tokens) + sum(s.size for s in self.siblings)

    @property
    def t_aside(self) -> float:
        """Of ``seconds``: what is not the chain's per-token drafting (the catch-up, the branches' tails)."""
        return self.t_sync + self.t_branches

    def from_lookup(self, i: int) -> bool:
        """Whether token ``i`` came from prompt lookup."""
        return i < self.lookup or i >= len(self.tokens) - self.tail

    def lookup_kept(self, n: int) -> int:
        """Of the first ``n`` tokens (those the target kept), how many came from prompt lookup."""
        return min(n, self.lookup) + max(0, n - (len(self.tokens) - self.tail))

    def earlier_kept(self, n: int) -> int:
        """Of the first ``n`` tokens (those the target kept), how many lookup copied from an earlier request."""
        return (min(n, self.lookup) if self.earlier_head else 0) + \
            (max(0, n - (len(self.tokens) - self.tail)) if self.earlier_tail else 0)


def end_of_reply(tokens: Sequence[int], is_eog: Callable[[int], Optional[bool]]) -> Optional[int]:
    """How many of ``tokens`` run through the first end-of-generation token (the reply ends there if the target
    keeps it: nothing after it can be emitted); None without one (or where ``is_eog`` cannot tell: None)."""
    return next((i + 1 for i, tok in enumerate(tokens) if is_eog(tok)), None)


class DraftSource(Protocol):
    """The model a :class:`~app.engine.drafters.draftmodel.DraftModelProposer` drafts with: a cache of a prefix
    of the history that it syncs, extends one token at a time and rolls back (``backend.Model``'s semantics)."""

    n_ctx: int  # tokens its cache holds

    @property
    def n_past(self) -> int:
        """Tokens in its cache."""

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Make the cache hold ``tokens`` (keeping the common prefix); a copy of the last one's logits."""

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """Append ``tokens`` to the cache; the logits rows for the positions ``logits_for``."""

    def missing(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` a :meth:`sync` would read."""

    def rollback(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` cached tokens."""

    def is_eog(self, token: int) -> Optional[bool]:
        """Whether ``token`` ends generation; None where the source has no vocabulary to tell (an MTP head: the
        loop cuts the draft at the target's end of generation instead)."""


class Proposer(Protocol):
    name: str
    couples: bool  # takes the coupled rule's noise (``propose(..., noise=)``)
    retest_tokens: int  # a pause on its acceptance is re-tested at each generation's start, this many tokens
    mixes: bool  # chooses its drafter per step: offered the controller's ceiling, bound to the controller

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        """A new generation starts from ``prompt``. ``warm``: prefill caches now (False while speculation is
        paused; ``propose`` must then catch up by itself)."""

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool) -> Draft:
        """Up to ``k`` tokens to follow ``history``. ``sample``: draw from q (rejection sampling) rather
        than take the most likely token."""

    def bind(self, length: DraftLength) -> None:
        """The draft-length controller of the generation about to begin."""

    def finish(self, history: Sequence[int], end: Optional[int] = None) -> None:
        """The generation ended at ``history`` (``end``: the end-of-generation token the target chose there)."""

    def time_tokens(self, history: Sequence[int], k: int) -> float:
        """Seconds for ``k`` draft decodes after ``history``, timed without proposing (0.0: nothing to time)."""

    def catch_up(self, history: Sequence[int], t_d: float) -> tuple[int, float]:
        """(tokens of ``history`` it has not read, the expected seconds to read them); ``t_d``: the controller's
        measured seconds per draft token, the unit of its priors. (0, 0.0): it reads nothing."""

    def close(self) -> None:
        """Free what the proposer holds."""


class ProposerBase:
    """The optional abilities of :class:`Proposer` as a proposer without them answers; a proposer that has one
    overrides it."""

    couples = False
    retest_tokens = 0
    mixes = False

    def bind(self, length: DraftLength) -> None:
        pass

    def finish(self, history: Sequence[int], end: Optional[int] = None) -> None:
        pass

    def time_tokens(self, history: Sequence[int], k: int) -> float:
        return 0.0  # no model: drafting costs nothing to re-measure

    def catch_up(self, history: Sequence[int], t_d: float) -> tuple[int, float]:
        return 0, 0.0  # no model: nothing to catch up on
