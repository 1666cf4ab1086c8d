"""Two drafters at once: before each step, prompt lookup, the draft model, lookup extended by the draft model,
or no draft — whichever is expected to give the most tokens per second under what was measured; and while the
draft model drafts, whether lookup should take over from it (:func:`hand_over`).

For a proposal of ``n_l`` lookup tokens followed by ``n_d`` draft-model tokens (either may be 0), with
per-token acceptance ``alpha_l`` for lookup tokens (measured for matches of that length) and ``alpha_d`` for
the draft's (Leviathan et al.'s i.i.d. assumption, position by position):

    E(n_l, n_d) = 1 + sum_{i=1..n_l} alpha_l^i + alpha_l^n_l * sum_{j=1..n_d} alpha_d^j
    cost(n_l, n_d) = R(p + n_l) [n_d > 0] + (R(p + E) - R(p)) [n_d = 0, the draft model in use]
                     + n_d * t_d + t_v(n_l + n_d + 1)
    R(n) = t_s min(n - 1, 1) + t_c (n - 2)^+   (what reading n unseen tokens costs the draft)

with ``t_v(n)`` what a target pass over ``n`` tokens costs (the verify line ``a + b n`` with each measured
size's own shape, ``verifycost.py``), and the step takes ``argmax E / cost`` over: no draft (E = 1, cost
t_v(1)); the draft model at the controller's K (``draftlen.py``); lookup proposals of length 1 .. what the
match offers; and, where the match's continuation ends before the draft limit, the whole continuation extended
by 1 .. K draft tokens.

``p`` is how many history tokens the draft model has not read: 1 in steady state (the pending token, read by
its first decode), 2 after a fully accepted draft (its own last token and the bonus token: a 2-token batch,
``t_s``, on the demo pair's CPU about 17 ms, 1.7 draft tokens, which ``t_d`` leaves out), more after lookup
steps (``t_c`` a token, a batch: about 0.75 of a draft token there). It reads all of them, so a lookup step
costs the draft model what it *adds* to that reading, R(p + E) - R(p); and a return to the draft model is
charged what it must read first.

A return to the draft model after a lookup stretch (``p`` > 2) pays its catch-up once and then drafts for a
run of steps (until lookup takes over again), so the catch-up beyond the steady read is charged shared over
``runs``, the mean length of the recent runs (renewal-reward: a one-off cost over the cycle it opens); and
the draft model is then weighed against a plain step like everything else, so where lookup's stretches are
broken by short edits (a renamed variable) the gaps are filled by plain steps, as lookup alone fills them.
Never locked out: each such plain step adds what it lost against the draft model's steady rate to a
``regret``, and once that reaches the catch-up's cost the draft model returns (the ski-rental rule: rent
until the rent paid equals the price, Karlin et al. 1988, which never pays more than twice the best choice
made in hindsight).

Lookup acceptance depends on how long the match is (a 2-token match is a guess; a 20-token match is a copy),
so it is estimated per match-length bucket, with a weak prior and exponential forgetting. A bucket that is
never tried is never measured (a good draft model's rate can stay above the prior's forever), so the choice
reads it *optimistically*, an upper confidence bound in the manner of UCB (Auer et al. 2002):
``alpha_l + Z * sqrt(alpha_l (1 - alpha_l) / n)`` over its ``n`` judged tokens: a bucket tried a few times is
given the benefit of the doubt, one tried often is taken at its measure (``Z`` small: at the ~20 judged tokens
forgetting keeps, the bound is within 0.05 of the estimate). (Capping it by what the last few proposals of
any length kept, so that a reply that edits as it copies is seen sooner, made lookup lose to a draft model that
reads everything where long matches were copies: left out.)

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192), Eq. 1; Karlin, Manasse, Rudolph,
Sleator, Algorithmica 3 (1988), competitive snoopy caching (the ski-rental rule); Saxena 2023, prompt lookup
decoding; Auer, Cesa-Bianchi, Fischer, Machine Learning 47 (2002), UCB1; Oliaro et al. 2024, SuffixDecoding
(arXiv:2411.04975): match length as the lookup's confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

BUCKETS = (2, 3, 4, 6, 9, 16)  # match lengths: bucket i holds lengths from BUCKETS[i] up to the next
# A weak prior per bucket (two judged tokens): the longer the match, the likelier a copy — high enough that a
# long match is tried against a good draft model (a bucket never tried would never be measured).
PRIOR_ALPHA_L = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PRIOR_TRIALS_L = 2.0
FORGET_L = 0.95  # per judged lookup proposal: a bucket follows its last ~20 proposals
Z = 0.5  # the optimism of an upper confidence bound, in standard errors
MARGIN = 0.02  # a lookup proposal must beat a plain step by 2 % (as the draft model must: draftlen.py)
RISK = 0.02  # a generation's lookup proposals may lose at most this share of its time so far, plus what they won


@dataclass(frozen=True)
class Choice:
    """What to draft this step: ``lookup`` tokens from the match, then ``draft`` tokens from the draft model
    (both 0: a plain step); ``rate``: the expected tokens per second."""

    lookup: int = 0
    draft: int = 0
    rate: float = 0.0
    regret: float = 0.0  # a plain step taken to spare the draft model a catch-up: seconds it lost to its drafting


class LookupAcceptance:
    """Per-token acceptance of lookup proposals, by match-length bucket."""

    def __init__(self):
        self.accepted = [a * PRIOR_TRIALS_L for a in PRIOR_ALPHA_L]
        self.trials = [PRIOR_TRIALS_L] * len(BUCKETS)

    @staticmethod
    def bucket(match_len: int) -> int:
        return max(i for i, lo in enumerate(BUCKETS) if match_len >= lo or i == 0)

    def alpha(self, match_len: int) -> float:
        b = self.bucket(match_len)
        return self.accepted[b] / self.trials[b]

    def optimistic(self, match_len: int) -> float:
        """The upper confidence bound of :meth:`alpha` (see the module docstring), below 1."""
        b = self.bucket(match_len)
        a = self.accepted[b] / self.trials[b]
        return min(a + Z * math.sqrt(a * (1 - a) / self.trials[b]), 0.999)

    def record(self, match_len: int, proposed: int, accepted: int) -> None:
        """``proposed`` lookup tokens verified, the first ``accepted`` of them kept."""
        if proposed <= 0:
            return
        b = self.bucket(match_len)
        judged = min(accepted + 1, proposed)
        self.accepted[b] = self.accepted[b] * FORGET_L + accepted
        self.trials[b] = self.trials[b] * FORGET_L + judged


class LookupRisk:
    """What one generation's lookup proposals may still lose. A match that breaks after its first token costs a
    verify pass of its length for one token: on a compute-bound CPU a 17-token pass costs 7 plain steps, and
    a bucket's acceptance, however well measured over many replies, is a gamble on this one. So a proposal's
    worst case (all of it rejected: ``t_v(n + 1) - t_v(1)`` more than a plain step) must fit in ``RISK`` of the
    generation's time so far plus what its earlier proposals won (their losses subtracted): however the gambles
    fall, lookup makes a reply at most about ``RISK`` slower than plain decoding, and proposals start short and
    grow as they pay, as a copy does (a slow start, after TCP's)."""

    def __init__(self, started: float):
        self.started = started  # when the generation began (its prefill included)
        self.won = 0.0  # seconds its judged proposals saved over plain steps (negative: lost)

    def judged(self, tv: Callable[[int], float], proposed: int, kept: int) -> None:
        """A pass that carried ``proposed`` lookup tokens alone kept ``kept`` of them."""
        self.won += (kept + 1) * tv(1) - tv(proposed + 1)

    def longest(self, tv: Callable[[int], float], now: float, n_max: int) -> int:
        """The longest proposal (up to ``n_max``) whose worst case fits what may still be lost at ``now``."""
        allowance = RISK * (now - self.started) + self.won
        n = 0
        while n < n_max and tv(n + 2) - tv(1) <= allowance:
            n += 1
        return n


def expected_mixed(alpha_l: float, n_l: int, alpha_d: float = 0.0, n_d: int = 0) -> float:
    """E(n_l, n_d): expected tokens per target pass for n_l lookup tokens then n_d draft tokens."""
    e, run = 1.0, 1.0
    for _ in range(n_l):
        run *= alpha_l
        e += run
    for _ in range(n_d):
        run *= alpha_d
        e += run
    return e


def reading(n: float, t_s: float, t_c: float) -> float:
    """Seconds the draft model spends reading ``n`` history tokens it has not seen before it drafts: nothing
    for one (its first decode reads it), ``t_s`` for two, ``t_c`` for each further one; ``n`` may be an
    expectation (linear in between)."""
    return t_s * min(max(n - 1, 0.0), 1.0) + t_c * max(n - 2, 0.0)


def choose(tv: Callable[[int], float], *, alpha_l: float, n_avail: int, k_d: int, alpha_d: float, t_d: float,
           t_c: float, can_extend: bool, k_max: int, t_s: float = 0.0, pending: int = 1, runs: float = 1.0,
           regret: float = 0.0) -> Choice:
    """The best proposal for one step (see the module docstring): ``tv(n)`` a target pass's cost, ``n_avail``
    lookup tokens the match offers, ``k_d`` the draft model's K (0: it should not draft now),
    ``can_extend``: the match's continuation ended before the draft limit, so draft tokens may follow it;
    ``pending`` history tokens the draft model has not read (1 in steady state), read at ``t_s`` and ``t_c``
    (:func:`reading`), the part of it beyond the steady read shared over ``runs`` draft steps."""
    catch_up = lambda n: reading(n, t_s, t_c) - reading(min(n, 2), t_s, t_c)  # noqa: E731

    def read(n: float) -> float:  # a catch-up beyond the steady read is shared by the draft steps it enables
        return reading(min(n, 2), t_s, t_c) + catch_up(n) / max(runs, 1.0)

    plain = Choice(rate=1.0 / tv(1))
    best = plain
    if k_d > 0:  # the controller chose to draft (its pauses decide between the draft model and plain steps) …
        e_d, t_draft = expected_mixed(0.0, 0, alpha_d, k_d), k_d * t_d + tv(k_d + 1)
        draft = Choice(draft=k_d, rate=e_d / (t_draft + read(pending)))
        if pending <= 2 or draft.rate > plain.rate * (1 + MARGIN) or regret >= catch_up(pending):
            best = draft  # … unless a catch-up first makes it lose, and plain steps have not yet lost as much
        else:
            best = replace(plain, regret=max(tv(1) - (t_draft + read(min(pending, 2))) / e_d, 0.0))
    # the draft model will read what a lookup step emits before it drafts again: what that adds to its reading
    # (E(n, 0) summed as n grows, as expected_mixed sums it: this runs before every step)
    best_lookup, e, run, read_now = None, 1.0, 1.0, read(pending) if k_d > 0 else 0.0
    for n in range(1, n_avail + 1):
        run *= alpha_l
        e += run
        rate = e / (tv(n + 1) + (read(pending + e) - read_now if k_d > 0 else 0.0))
        if best_lookup is None or rate > best_lookup.rate:
            best_lookup = Choice(lookup=n, rate=rate)
    if best_lookup is not None and best_lookup.rate > plain.rate * (1 + MARGIN) and best_lookup.rate > best.rate:
        best = best_lookup
    if can_extend and n_avail > 0 and k_d > 0:
        read_all = read(pending + n_avail)
        for j in range(1, min(k_d, k_max - n_avail) + 1):  # E(n_avail, j), continuing the sum above
            run *= alpha_d
            e += run
            rate = e / (read_all + j * t_d + tv(n_avail + j + 1))
            if rate > best.rate and rate > plain.rate * (1 + MARGIN):
                best = Choice(lookup=n_avail, draft=j, rate=rate)
    return best


def hand_over(tv: Callable[[int], float], *, alpha_d: float, alpha_l: float, j: int, k_d: int, n_avail: int,
              t_d: float, sunk: float, t_s: float, t_c: float) -> int:
    """After ``j`` draft-model tokens of a step that planned ``k_d``: how many of the ``n_avail`` tokens that
    prompt lookup now offers (the history *and* those ``j`` matched it) should end the proposal instead of
    more drafting; 0: draft on. The same rate as :func:`choose`, E / cost, over what is left to decide:

        draft r more:   E = E_j + alpha_d^j (E(0, r) - 1),    cost = sunk + r t_d + t_v(j + r + 1)
        lookup's m:     E = E_j + alpha_d^j (E(m) - 1),       cost = sunk + t_v(j + m + 1) + R(2 + E(m) - 1) - R(2)

    ``sunk``: what the step spent before (the reading and the ``j`` drafted tokens); the lookup tokens are
    free to propose, but the draft model reads those kept before it drafts again (R, :func:`reading`)."""
    e_j, run = expected_mixed(0.0, 0, alpha_d, j), alpha_d ** j
    best = max((e_j + run * (expected_mixed(0.0, 0, alpha_d, r) - 1.0)) / (sunk + r * t_d + tv(j + r + 1))
               for r in range(max(k_d - j, 0) + 1))
    take = 0
    for m in range(1, n_avail + 1):
        gain = expected_mixed(alpha_l, m) - 1.0
        extra = reading(2 + gain, t_s, t_c) - reading(2, t_s, t_c)
        rate = (e_j + run * gain) / (sunk + tv(j + m + 1) + extra)
        if rate > best * (1 + MARGIN):
            best, take = rate, m
    return take
