"""How many siblings a tree draft adds to a chain of K tokens: priced from the verify costs auto K measures.

A sibling is one more token in the verify pass and, where the target takes it, one more token kept (the target
would have corrected the chain there anyway; after a sibling it adds its own token too). So with ``b`` siblings
on a chain of ``K`` (``drafters/tree.py`` places them, in chain order, where the draft was unsure):

    rate(K, b) = (E(alpha, K) + sum_{r < b} h_r) / (K t_d + t_v(K + 1 + b) + o [b > 0])

- ``E``, ``alpha``, ``t_d``, ``t_v(n)``: the chain's, as ``draftlen.py`` measures them (``t_v`` from the measured
  size-shapes, ``verifycost.py``; a tree pass of ``n`` tokens is a pass of ``n`` tokens);
- ``h_r``: how often the ``r``-th sibling of a step was the one the target took (per sibling offered, with
  forgetting, from a prior that halves with the rank: a later sibling sits deeper, behind more chain tokens);
- ``o``: what a tree pass costs beyond a chain pass of its size (its sequences' bookkeeping), the lower median of
  the tree passes measured.

A draft model of its own continues each sibling with a tail of ``d`` tokens (``drafters/tails.py``). A tail
token costs the draft one more token (``t_d``; the branches of one depth share a pass, so this overprices it
where there are several) and the target one more verify row, and gains a token where the target took its sibling
and every tail token before it: the ``i``-th, ``h_r alpha^i`` (the chain's acceptance). So with tails of ``d``:

    rate(K, b, d) = (E(alpha, K) + sum_{r < b} h_r (1 + alpha + ... + alpha^d))
                    / (K t_d + b d t_d + t_v(K + 1 + b (1 + d)) + o [b > 0])

(a sibling deep in the chain gets a shorter tail, never deeper than K: the price takes the full ``d``, the
dearer side). The plan is the ``(b, d)`` of the highest rate, ``d`` up to ``MAX_TAIL``; with a fixed K it is
``BRANCHES`` siblings with tails of ``TAIL`` tokens.

The budget is the ``b`` of the highest rate, 0 (the chain) unless a tree beats it by ``MARGIN``: where a verify
pass grows with its tokens and siblings are seldom taken, the chain stays — a tree is never chosen on a price
it has not shown. The priors let a tree be tried where it could pay; what it then shows decides.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192), Eq. 1 and Thm 3.8 with measured costs;
Miao et al., SpecInfer (arXiv:2305.09781) and Chen et al., Sequoia (arXiv:2402.12374): a tree's size chosen
against the hardware's verify cost.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

from app.engine.control.costs import lower_median
from app.engine.control.verifycost import VerifyCost
from app.engine.stats import expected_tokens

BRANCHES = 4  # siblings a step may add with a fixed K
MAX_BRANCHES = 8  # the most the controller adds
TAIL = 2  # tokens a draft model's branch goes on past its sibling with a fixed K
MAX_TAIL = 4  # the most the controller lets a branch go on
PRIOR_HIT, PRIOR_OFFERED = 0.3, 2.0  # the first sibling's prior: taken 30% of the time, the weight of two offers
FORGET = 0.95  # per tree step
MARGIN = 0.02  # a tree must beat the chain by 2% on the measured costs
OVERHEAD_WINDOW = 8


class BranchBook:
    """What tree steps showed: hits by sibling rank, and a tree pass's overhead; the budget they price."""

    def __init__(self) -> None:
        self.offered = [PRIOR_OFFERED] * MAX_BRANCHES
        self.hits = [PRIOR_OFFERED * PRIOR_HIT / 2 ** r for r in range(MAX_BRANCHES)]
        self._over: deque = deque(maxlen=OVERHEAD_WINDOW)

    def hit_rate(self, rank: int) -> float:
        return self.hits[rank] / self.offered[rank]

    @property
    def overhead(self) -> float:
        return lower_median(self._over) or 0.0

    def learn(self, offered: int, hit: Optional[int], overhead: Optional[float] = None) -> None:
        """A tree step offered ``offered`` siblings and the target took the one of rank ``hit`` (None: none);
        ``overhead``: its pass's seconds beyond the price of a chain pass of its size."""
        if offered <= 0:
            return
        for r in range(min(offered, MAX_BRANCHES)):
            self.offered[r] = self.offered[r] * FORGET + 1.0
            self.hits[r] = self.hits[r] * FORGET + (1.0 if r == hit else 0.0)
        if overhead is not None:
            self._over.append(max(0.0, overhead))

    def rates(self, tv: VerifyCost, alpha: float, t_d: float, k: int, tail: int = 0) -> list[float]:
        """Expected tokens per second for budgets 0 .. MAX_BRANCHES on a chain of ``k``, each sibling with ``tail``
        tokens after it (``tv``, ``alpha``, ``t_d``: the controller's measured verify cost, acceptance and draft
        cost)."""
        a = min(alpha, 0.999)
        tokens, spent = expected_tokens(a, k), k * t_d
        reach = sum(a ** i for i in range(tail + 1))  # a taken sibling's tokens: itself, then its tail's kept ones
        out, gain = [tokens / (spent + tv(k + 1))], 0.0
        for b in range(1, MAX_BRANCHES + 1):
            gain += self.hit_rate(b - 1) * reach
            out.append((tokens + gain) / (spent + b * tail * t_d + tv(k + 1 + b * (1 + tail)) + self.overhead))
        return out

    def plan(self, tv: VerifyCost, alpha: float, t_d: float, k: int, most: int = 0) -> tuple[int, int]:
        """(siblings, tail tokens each) for a chain of ``k``, tails up to ``most`` tokens: (0, 0) for the chain;
        priced as :meth:`rates`."""
        if k <= 0:
            return 0, 0
        chain, best, rate = self.rates(tv, alpha, t_d, k)[0], (0, 0), 0.0
        for tail in range(min(most, k - 1) + 1):
            r = self.rates(tv, alpha, t_d, k, tail)
            b = max(range(1, len(r)), key=r.__getitem__)
            if r[b] > rate:
                best, rate = (b, tail), r[b]
        return best if rate > chain * (1.0 + MARGIN) else (0, 0)

    def budget(self, tv: VerifyCost, alpha: float, t_d: float, k: int) -> int:
        """The siblings to add to a chain of ``k`` (0: the chain), one-token branches, priced as :meth:`rates`."""
        return self.plan(tv, alpha, t_d, k)[0]
