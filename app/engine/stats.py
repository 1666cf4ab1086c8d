"""Speculative decoding statistics and the speedup they predict.

Notation (Leviathan et al., arXiv:2211.17192): ``alpha`` is the probability that a drafted token is accepted
(assumed i.i.d. per position), ``gamma`` the number of drafted tokens per target pass, ``c`` the cost of one
draft token relative to one plain target step. Their Theorem 3.8 assumes verifying ``gamma + 1`` tokens costs
one target step; on CPUs and small-batch GPUs it does not, so we use ``v`` = cost of verifying ``gamma + 1``
tokens relative to one plain target step (``v = 1`` recovers the paper):

    expected tokens per target pass   E = (1 - alpha^(gamma+1)) / (1 - alpha)            (Eq. 1)
    expected speedup (the bound)      S = E / (gamma * c + v)                              (Thm 3.8, generalised)

``alpha`` is estimated from the run as accepted / (accepted + rejections): every drafted position that the
target actually judged is one Bernoulli trial (positions after a rejection are never judged).

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192); Chen et al. 2023 (arXiv:2302.01318);
vLLM's and llama.cpp's metric names (acceptance rate = accepted / drafted, mean acceptance length =
tokens per target pass).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Sequence

from app.engine.events import StepEvent
from app.engine.summary import Summary


def expected_tokens(alpha: float, gamma: float) -> float:
    """E[#tokens per target pass] = (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 when alpha = 1."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)


def leviathan_bound(alpha: float, gamma: float, c: float, v: float) -> float:
    """Predicted speedup over plain decoding: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma*c + v))."""
    return expected_tokens(alpha, gamma) / (gamma * c + v)


@dataclass
class Stats:
    """Accumulates StepEvents of one generation (or several, for a benchmark), and the wall clock of the steps
    when ``add`` is told when each arrived (a running generation's live decode time)."""

    steps: int = 0  # target passes
    emitted: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0  # steps where a drafted token was judged and refused
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0  # decode time, the steps' own wall seconds summed (prefill excluded)
    spec_steps: int = 0  # steps that verified a non-empty draft
    t_verify_spec: float = 0.0
    tested_at: list = field(default_factory=list)  # per draft position: times judged
    accepted_at: list = field(default_factory=list)  # per draft position: times accepted
    histogram: list = field(default_factory=list)  # histogram[n] = steps that accepted n tokens
    paused_steps: int = 0  # plain steps taken because auto K expected drafting to lose
    probe_steps: int = 0  # steps auto K drafted to measure while paused (or before it knew the costs)
    limit: Optional[str] = None  # why speculation paused, in words (the loop's last word: ``end``)
    lookup_drafted: int = 0  # of ``drafted``: proposed by prompt lookup (the rest by the draft model)
    lookup_accepted: int = 0  # of ``accepted``: lookup's
    lookup_earlier: int = 0  # of ``lookup_accepted``: copied from an earlier request's text
    t_sync: float = 0.0  # of ``t_draft``: the draft model catching up on history it had skipped
    tree_steps: int = 0  # passes that verified a tree draft
    tree_tokens: int = 0  # of ``drafted``: the branch tokens of those trees
    tree_accepted: int = 0  # of ``accepted``: what those passes kept
    branch_hits: int = 0  # tree passes that kept a branch
    t_first: Optional[float] = None  # clock reading when decoding began (from the first ``add(ev, now)``)
    t_last: Optional[float] = None  # clock reading of the latest ``add(ev, now)``

    def add(self, ev: StepEvent, now: Optional[float] = None) -> None:
        """Count one step; ``now`` (a ``time.perf_counter()`` reading when it arrived) also times the decode
        from the clock: it began the first step's draft and verify seconds before that step arrived."""
        if now is not None:
            if self.t_first is None:
                self.t_first = now - (ev.t_draft + ev.t_verify)
            self.t_last = now
        self.steps += 1
        self.emitted += ev.emitted
        self.drafted += ev.drafted
        self.accepted += ev.accepted
        self.t_draft += ev.t_draft
        self.t_verify += ev.t_verify
        self.t_total += ev.t_step
        self.paused_steps += ev.paused
        self.probe_steps += ev.probe
        self.lookup_drafted += ev.lookup
        self.lookup_accepted += ev.lookup_accepted
        self.lookup_earlier += ev.lookup_earlier
        self.t_sync += ev.t_sync
        if ev.tree:
            self.tree_steps += 1
            self.tree_tokens += ev.tree
            self.tree_accepted += ev.accepted
            self.branch_hits += ev.branch_hit
        if ev.paused and ev.limit:
            self.limit = ev.limit  # live: why the latest pause happened
        if ev.drafted:
            self.spec_steps += 1
            self.t_verify_spec += ev.t_verify
            deep = ev.drafted - ev.tree  # a tree's branches sit beside its chain: positions are its chain's depths
            judged = min(ev.accepted + 1, deep)
            if ev.accepted < deep:
                self.rejections += 1
            _grow(self.tested_at, judged)
            _grow(self.accepted_at, ev.accepted)
            _grow(self.histogram, ev.accepted + 1)
            for i in range(judged):
                self.tested_at[i] += 1
            for i in range(ev.accepted):
                self.accepted_at[i] += 1
            self.histogram[ev.accepted] += 1

    def end(self, limit: Optional[str]) -> None:
        """The generation is over: why speculation paused is ``limit`` (the draft-length policy's final word)
        or else the latest pause's reason; None if it never paused."""
        self.limit = (limit or self.limit) if self.paused_steps else None

    @property
    def wall(self) -> Optional[float]:
        """Decode seconds from the clock readings given to ``add`` (None before the first)."""
        if self.t_first is None or self.t_last is None:
            return None
        return max(self.t_last - self.t_first, 1e-9)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens per target pass (the 'compression ratio'; 1.0 for plain decoding)."""
        return self.emitted / self.steps if self.steps else 0.0

    @property
    def alpha(self) -> float:
        trials = self.accepted + self.rejections
        return self.accepted / trials if trials else 0.0

    @property
    def mean_gamma(self) -> float:
        """Drafted tokens per drafting pass: its chain's depth (a tree's branch tokens sit beside the chain)."""
        return (self.drafted - self.tree_tokens) / self.spec_steps if self.spec_steps else 0.0

    def summary(self, baseline_tps: Optional[float] = None, wall: bool = False) -> Summary:
        """The figures so far; ``wall``: decode time from the clock (``Stats.wall``, the gaps between steps
        included: a running generation's live estimate) where ``add`` was given it, else the steps' own."""
        t_total = self.wall if wall and self.wall is not None else self.t_total
        tps = self.emitted / t_total if t_total > 0 else 0.0
        speedup = tps / baseline_tps if baseline_tps and t_total > 0 else None
        out = Summary(
            tokens=self.emitted, steps=self.steps, drafted=self.drafted, accepted=self.accepted,
            acceptance_rate=self.acceptance_rate, mean_accepted=self.mean_accepted, alpha=self.alpha,
            mean_k=self.mean_gamma, per_position=_per_position(self.accepted_at, self.tested_at),
            histogram=list(self.histogram), tested_at=list(self.tested_at), accepted_at=list(self.accepted_at),
            rejections=self.rejections, spec_steps=self.spec_steps, t_verify_spec=self.t_verify_spec,
            tokens_per_s=tps, t_draft=self.t_draft, t_verify=self.t_verify, t_total=t_total,
            baseline_tps=baseline_tps, speedup=speedup, paused_steps=self.paused_steps,
            probe_steps=self.probe_steps, limit=self.limit, lookup_drafted=self.lookup_drafted,
            lookup_accepted=self.lookup_accepted, lookup_earlier=self.lookup_earlier, t_sync=self.t_sync,
            tree_steps=self.tree_steps, tree_tokens=self.tree_tokens, tree_accepted=self.tree_accepted,
            branch_hits=self.branch_hits)
        c, v, bound = costs(out, baseline_tps)
        return replace(out, c=c, v=v, bound=bound, efficiency=speedup / bound if speedup and bound else None)


def _grow(values: list, n: int) -> None:
    if len(values) < n:
        values.extend([0] * (n - len(values)))


def pool(summaries: Sequence[Summary]) -> Summary:
    """Pool several runs' summaries: counters summed, rates recomputed from the sums (no baseline, so no
    speedup, c, v or bound: ``costs`` gives those for the pool and a baseline)."""
    total = lambda name: sum(getattr(s, name) for s in summaries)  # noqa: E731
    return Stats(
        steps=total("steps"), emitted=total("tokens"), drafted=total("drafted"), accepted=total("accepted"),
        rejections=total("rejections"), t_draft=total("t_draft"), t_verify=total("t_verify"),
        t_total=total("t_total"), spec_steps=total("spec_steps"), t_verify_spec=total("t_verify_spec"),
        tested_at=_sum_lists(s.tested_at for s in summaries), accepted_at=_sum_lists(s.accepted_at for s in summaries),
        histogram=_sum_lists(s.histogram for s in summaries), paused_steps=total("paused_steps"),
        probe_steps=total("probe_steps"), limit=next((s.limit for s in reversed(summaries) if s.limit), None),
        lookup_drafted=total("lookup_drafted"), lookup_accepted=total("lookup_accepted"), t_sync=total("t_sync"),
        lookup_earlier=total("lookup_earlier"), tree_steps=total("tree_steps"), tree_tokens=total("tree_tokens"),
        tree_accepted=total("tree_accepted"), branch_hits=total("branch_hits"),
    ).summary()


def costs(pooled: Summary, baseline_tps: Optional[float]) -> tuple:
    """(c, v, bound) from pooled stats and the plain tokens/s: c = draft cost per drafted token and v = cost
    of a verify pass, both in plain target steps; bound = the predicted speedup (``leviathan_bound``)."""
    if not baseline_tps or not pooled.drafted or not pooled.spec_steps:
        return None, None, None
    t_target = 1.0 / baseline_tps
    c = pooled.t_draft / max(pooled.drafted - pooled.tree_tokens, 1) / t_target  # a tree's branches cost no draft step
    v = pooled.t_verify_spec / pooled.spec_steps / t_target
    return c, v, leviathan_bound(pooled.alpha, pooled.mean_k, c, v)


def median(values: Iterable[Optional[float]]) -> Optional[float]:
    """The median of the values that are not None (None if there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _per_position(accepted_at: list, tested_at: list) -> list[float]:
    """Acceptance rate at each draft position (positions never judged count as 0)."""
    return [a / t if t else 0.0 for a, t in zip(accepted_at + [0] * len(tested_at), tested_at)]


def _sum_lists(lists: Iterable[list]) -> list:
    out: list = []
    for values in lists:
        out.extend([0] * (len(values) - len(out)))
        for i, n in enumerate(values):
            out[i] += n
    return out
