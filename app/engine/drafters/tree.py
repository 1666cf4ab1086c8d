"""The tree drafter: a drafter's chain, with a second child wherever the draft was unsure.

The drafter drafts its chain as always: the draft model (``draftmodel.py``), or a head that gives a distribution per
drafted position through the same proposer: the target's MTP head, the assistant drafter, the EAGLE-3 head
(``mtp.py``, ``assistant.py``, ``eagle3.py``) or the DFlash block (``dflash.py``). At each position where its top
probability is under ``P_SPLIT`` it also proposes its runner-up, a sibling of the chain's token: the tree is the
chain plus these one-token branches, verified in one target pass (``decoding/tree.py``, ``llama/treekv.py``, which
also keeps the target's rows that the heads read along the kept path). A sibling costs the draft nothing more (its
logits are already there) and the target one more row; where the target turns the chain's token down and takes
the sibling, the step keeps one token more (the sibling, then the target's own token after it) than the chain
would have.

The runner-up is drawn as the verification rule needs it: at temperature 0 (and for sample-and-match) it is the
second most likely token; with the coupled rule the second-best Gumbel-max score under the position's noise;
with rejection sampling a draw from ``q`` without the chain's token (sampling without replacement, which
recursive rejection sampling verifies exactly). Whether a position gets a sibling depends only on that
position's ``q`` (its top probability) and on the siblings before it (the budget left), never on the tokens
drawn at it: exactness needs each token to be a draw from its ``q`` given the tree's shape there.

A draft model of its own (``DraftKind.MODEL``) also continues each sibling: it decodes the sibling and drafts its
own next tokens on a branch sequence of its context (``tails.py``), so a branch is a sibling and its tail, and a
step whose target takes the sibling can keep the tail's tokens too. The heads (the MTP head, the assistant, the
EAGLE-3 head, the DFlash block) keep one-token branches: they draft from the target's rows, which the target has
only for the path it kept, so they cannot continue a branch the target has not read.

How many siblings a step may add (the budget), and how deep a draft model's branches go, is the controller's
choice, from the measured verify and draft costs (``control/branches.py``); with a fixed K it is ``BRANCHES``
siblings with ``TAIL`` tokens after each.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from app.engine.control.branches import BRANCHES, MAX_TAIL, TAIL
from app.engine.control.draftlen import DraftLength
from app.engine.decoding.coupled import GumbelNoise, gumbel_max
from app.engine.decoding.sampling import SamplerSettings, penalise, recent_window
from app.engine.decoding.tree import Sibling, without
from app.engine.decoding.verify import sample_from
from app.engine.drafters.draftmodel import DraftModelProposer, softmax_at
from app.engine.drafters.protocol import Draft, ProposerBase
from app.engine.drafters.tails import Drawing, grow_tails
from app.engine.llama.treekv import TreeKv
from app.engine.names import ProposerName

P_SPLIT = 0.8  # a position gets a sibling where the draft's top probability is under this


class TreeProposer(ProposerBase):
    """Drafts a chain with ``chain`` (the draft model's proposer or a head's) and siblings where it was unsure (see
    the module docstring)."""

    name: str = ProposerName.TREE
    couples = True

    def __init__(self, chain: DraftModelProposer, p_split: float = P_SPLIT, tails: Optional[TreeKv] = None):
        """``tails``: the draft model's own context's tree passes, where its branches go past one token (a draft
        model of its own; None: one-token branches, a head's)."""
        self.chain = chain
        self.p_split = p_split
        self.tails = tails
        self.length: Optional[DraftLength] = None

    def bind(self, length: DraftLength) -> None:
        self.length = length

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        self.chain.begin(prompt, warm)

    def catch_up(self, history: Sequence[int], t_d: float) -> tuple[int, float]:
        return self.chain.catch_up(history, t_d)

    def time_tokens(self, history: Sequence[int], k: int) -> float:
        return self.chain.time_tokens(history, k)

    def plan(self, k: int) -> tuple[int, int]:
        """(siblings this step may add, tail tokens each may get): the controller's choice (auto K), else
        ``BRANCHES`` and ``TAIL`` (no tails where the drafter cannot continue a branch)."""
        length, most = self.length, MAX_TAIL if self.tails is not None else 0
        if length is None or not length.auto:
            return BRANCHES, min(TAIL, most)
        if not length.measured():
            return 0, 0
        return length.branches.plan(length.verify(), length.alpha, length.t_d or 0.0, k, most)

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings, rng: np.random.Generator,
                sample: bool, noise: Optional[GumbelNoise] = None) -> Draft:
        budget, depth = self.plan(k)
        siblings: list[Sibling] = []
        recents: list[list[int]] = []  # the penalty's recent tokens before each sibling
        base = len(history)

        def spare(pos: int, x: int, top: float, row: np.ndarray, recent: Sequence[int]) -> None:
            if len(siblings) >= budget or top >= self.p_split:
                return
            recents.append(list(recent))
            if not sample:  # the runner-up after the penalty (row: the logits)
                z = np.array(penalise(row, recent_window(recent, sampler), sampler.repeat_penalty), dtype=np.float64)
                z[x] = -np.inf
                alt = int(np.argmax(z))
                siblings.append(Sibling(pos, alt, None, softmax_at(row, alt)))
                return
            rest = without(row, [x])  # row: q
            if rest is None:
                recents.pop()
                return
            alt = sample_from(rest, rng) if noise is None else gumbel_max(rest, noise.at(base + pos, len(rest)))
            siblings.append(Sibling(pos, alt, rest, float(row[alt])))

        self.chain.spare = spare if budget else None
        try:
            draft = self.chain.propose(history, k, sampler, rng, sample, noise=noise)
        finally:
            self.chain.spare = None
        draft.siblings = siblings
        if depth and siblings and self.tails is not None:
            t0 = time.perf_counter()
            how = Drawing(sampler, rng, sample, noise, self.chain.p_min, self.chain.model.is_eog)
            draft.siblings = grow_tails(self.tails, siblings, recents, base, depth, k, how)
            draft.t_branches = time.perf_counter() - t0
            draft.seconds += draft.t_branches
        return draft

    def close(self) -> None:
        self.chain.close()

