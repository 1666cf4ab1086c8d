"""How many tokens to draft each step: a fixed K, or ``auto``, which may also choose not to draft at all.

``auto`` picks, before every step, the K that maximises the expected tokens per second under the current
estimates (Leviathan et al., arXiv:2211.17192, Eq. 1 and Thm 3.8, with the verify cost measured rather than
assumed to be one target step), **K = 0 included**:

    K* = argmax_{0 <= K <= K_max}  E(alpha, K) / (K * t_d + t_v(K + 1)),   E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha)

K = 0 is a plain target step (E = 1, cost t_v(1)): when no K can beat it, speculation *steps aside* and the
loop decodes plainly — output unchanged, since plain steps are ordinary target steps.

- ``alpha``: per-token acceptance probability, from the acceptance history (judged positions only), with
  exponential forgetting so it follows the text;
- ``t_d`` and ``t_v(n)``: the measured costs of a draft token and of a target pass over ``n`` tokens, learnt
  from the steps this controller is told of (``costs.py``, which also tells a busy machine from a slow pair).

This module is the policy; :class:`Phase` names where it stands. Measuring first, then choosing: the first step
of a fresh controller is plain (t_v(1)), the second drafts ``FIRST_K`` tokens (t_d, alpha and t_v(FIRST_K + 1));
from then on the argmax decides. A pause is a hypothesis: *probes* re-test it every ``GAP_MIN`` steps with the
real draft until ``CONFIRM`` quiet probes agree, then at exponentially growing gaps (up to ``GAP_MAX``), each
re-measuring what the pause rests on (:class:`Culprit`):
- where even a perfect draft (alpha = 1) could not pay with a free draft — verify cost rises about one target
  step per token, as on a CPU with a compute-bound target — the probe verifies a *free* proposal (prompt
  lookup: no draft model, no catch-up);
- where the draft's cost is what loses, the draft is *woken*: ``WAKE_K`` draft tokens are timed, not proposed,
  on whatever the draft's cache holds (no catch-up);
- where acceptance limits, the probe drafts with the real proposer.
Probes of a confirmed pause cost under ``BUDGET`` of the paused time (what they cost beyond plain steps, a
catch-up included, is counted). A pause resting on few probes or old ones is re-tested at the next generation.

A draft model must read what it has not seen before it drafts: the prompt, at a generation's start, or the text
lookup or plain steps wrote meanwhile. That reading is paid once, and only the tokens the generation may still
write can pay it back: before a step that would draft with the real draft (drafting, or a probe of it), the loop
tells the controller what the reading would cost (:meth:`hold`), and where it costs more than drafting at the
best K could save in the tokens left, the step is plain — the draft is *held* for it (a probe is put off to the
next gap). A code completion of 128 tokens after a 600-token prompt on a CPU where the draft barely pays reads
nothing; a chat reply that pays reads its prompt as before. Nothing is held before the costs are measured.
Where the costs were forgotten because the machine's load changed, a pause taken then says the machine looks
busy; a paused controller re-measures them with what reads nothing (a wake for the draft's cost, a free probe for
the verify cost), keeping its acceptance, so a load change costs a paused pair no catch-up.

A controller outlives one generation (``Pair`` keeps one per proposer), so what it learnt about this pair on
this machine carries over to the next request: a pair that cannot pay is not re-tried at every message.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192); llama.cpp's ``p_min`` early stop.
"""

from __future__ import annotations

from enum import Enum
from typing import Optional, Union

from app.engine.control.branches import BranchBook
from app.engine.control.costs import BUSY, CostModel
from app.engine.control.verifycost import VerifyCost
from app.engine.names import AUTO_K, StrEnum
from app.engine.stats import expected_tokens

PRIOR_ALPHA, PRIOR_TRIALS = 0.9, 4.0  # a weak prior: four judged tokens at 90%
FORGET_ALPHA = 0.9  # per drafted step: acceptance follows the last ~10 steps (acceptance comes in bursts)
FIRST_K = 4  # draft length of the first measuring step: long enough to see the verify slope through noise
# Draft length of a later probe while paused: the verify cost is then seen at 5 tokens, where larger K pays,
# rather than extrapolated from 3, where a noisy start can keep a pair paused that a longer K would speed up;
# 4 draft tokens every 8..256 paused steps.
PROBE_K = FIRST_K
GAP_MIN, GAP_MAX = 8, 256  # paused steps between probes: doubles after each probe that confirms the pause
CONFIRM = 2  # a pause is a hypothesis: re-tested every GAP_MIN steps until this many probes confirmed it
STALE = 512  # steps after which what a pause rests on is old: re-tested at the start of the next generation
WAKE_K = 2  # draft tokens timed (not proposed) to re-measure the draft's cost while the draft limits
BUDGET = 0.02  # confirmed pauses: what probes cost beyond plain steps stays under 2 % of the paused time
SWITCH_MARGIN = 0.02  # draft only where drafting is predicted to gain more than 2 % over a plain step …
RESUME_MARGIN = 0.05  # … and more than 5 % to resume after a pause: a few lucky probes must not start a loss


class Phase(Enum):
    """Where the controller stands before a step (one of these at a time)."""

    DRAFTING = "drafting"  # drafting K tokens a step (K = 0 before the first plain pass was measured)
    MEASURING = "measuring"  # not paused: a short draft that measures what choosing needs (FIRST_K)
    PAUSED = "paused"  # drafting is expected to lose: plain steps
    PROBING = "probing"  # paused; this step drafts with the real draft to re-test the pause
    FREE_PROBE = "free probe"  # paused; this step verifies a free proposal (prompt lookup): the verify cost
    WAKING = "waking"  # paused; this step times WAKE_K draft tokens without proposing them: the draft's cost


PAUSED_PHASES = frozenset({Phase.PAUSED, Phase.PROBING, Phase.FREE_PROBE, Phase.WAKING})
PROBE_PHASES = frozenset({Phase.MEASURING, Phase.PROBING, Phase.FREE_PROBE, Phase.WAKING})


class Culprit(StrEnum):
    """What a pause rests on, and so what its probes re-measure."""

    VERIFY = "verify"  # no K pays even with a free, perfect draft: probes verify a free proposal
    DRAFT = "draft"  # the draft's cost (it would pay with a free one): probes time the draft without proposing
    ACCEPTANCE = "acceptance"  # how often the draft is right: probes draft with the real draft


class DraftLength:
    """The draft-length controller. Read :attr:`k`, :attr:`free_probe` and :attr:`wake` before a step, then
    report the step with :meth:`update`."""

    def __init__(self, k: Union[int, str], k_max: int):
        self.auto = k == AUTO_K
        self.k_max = max(1, k_max if self.auto else int(k))
        self.k = 0 if self.auto else int(k)  # a fresh auto controller measures a plain step first
        self.accepted, self.trials = PRIOR_ALPHA * PRIOR_TRIALS, PRIOR_TRIALS
        self.costs = CostModel(self.k_max + 1)
        self.phase = Phase.DRAFTING
        self.gap, self.since_probe = GAP_MIN, 0
        self.evidence = 0  # quiet probes that confirmed the current pause
        self.retest_left = 0  # tokens a re-test (retest) still wants judged before the gaps between probes resume
        self.age = 0  # steps since the costs were last measured by a probe
        self.jumped: Optional[float] = None  # the costs were re-measured in a busy spell: timings jumped this much
        self._debt = self._paused_time = 0.0  # what probes cost beyond plain steps; the paused steps' time
        self._limit: Optional[str] = None  # the words for the current pause (recomputed when it changes)
        self.held: Optional[str] = None  # this step is plain: the draft's reading would cost more than it saves
        self.branches = BranchBook()  # what tree drafts showed, and the siblings they may add (branches.py)

    # --- the phase, as the loop and the drafters read it ------------------------------------------------

    @property
    def k(self) -> int:
        """The draft length of the next step (0: a plain step)."""
        return 0 if self.held else self._k

    @k.setter
    def k(self, k: int) -> None:
        self._k = k

    @property
    def paused(self) -> bool:
        """Drafting is expected to lose (probe steps of a pause included), or the draft is held for this step."""
        return self.phase in PAUSED_PHASES or self.held is not None

    @property
    def probing(self) -> bool:
        """This step measures: a measuring draft or a probe of a pause."""
        return self.phase in PROBE_PHASES and self.held is None

    @property
    def free_probe(self) -> bool:
        """This step's draft should come from a free proposal (prompt lookup)."""
        return self.phase is Phase.FREE_PROBE

    @property
    def wake(self) -> int:
        """Draft tokens to time this step without proposing them (re-measures the draft's cost); 0: none."""
        return WAKE_K if self.phase is Phase.WAKING else 0

    # --- estimates --------------------------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        return self.accepted / self.trials

    @property
    def t_d(self) -> Optional[float]:
        """Seconds per drafted token (``costs.py``)."""
        return self.costs.t_d

    def verify_line(self) -> tuple[float, float]:
        """(a, b) of ``t_v(n) = a + b n`` as choices weigh them: while paused, resuming must convince both the
        fit's slope and the paired one (``costs.py``)."""
        return self.costs.weighed_line(steep=self.paused)

    def verify(self) -> VerifyCost:
        """``t_v(n)`` as choices weigh it: :meth:`verify_line` with each measured size's shape (``verifycost.py``)."""
        return self.costs.verify(steep=self.paused)

    def rates(self, alpha: Optional[float] = None, t_d: Optional[float] = None) -> list[float]:
        """Expected tokens per second for K = 0 .. k_max (K = 0: a plain step), the verify cost as
        :meth:`verify` weighs it."""
        tv = self.verify()
        alpha = min(self.alpha if alpha is None else alpha, 0.999)
        t_d = (self.t_d or 0.0) if t_d is None else t_d
        return [expected_tokens(alpha, k) / (k * t_d + tv(k + 1)) for k in range(self.k_max + 1)]

    def measured(self) -> bool:
        """Enough is known to choose: a plain pass, a multi-token pass and the draft's cost."""
        return self.costs.measured()

    def saving(self, tokens: int, alpha: Optional[float] = None) -> float:
        """Seconds the best K should save over plain steps on ``tokens`` tokens at ``alpha`` (None: measured)."""
        r = self.rates(alpha)
        return max(0.0, tokens * (1.0 / r[0] - 1.0 / max(r[1:])))

    def worth_reading(self, seconds: float, tokens: int) -> bool:
        """Whether a draft that must first read for ``seconds`` can pay that back in the ``tokens`` the generation
        may still write. A probe tests whether the draft does better on this text than measured, so a paused
        controller prices it at acceptance no lower than the prior's. Before the costs are measured: yes (the
        first measurement is paid once per pair)."""
        if seconds <= 0.0 or not self.auto or not self.measured():
            return True
        alpha = max(self.alpha, PRIOR_ALPHA) if self.phase in PAUSED_PHASES else None
        return self.saving(tokens, alpha) > seconds

    @property
    def reads(self) -> bool:
        """The next step would draft with the real draft (which first reads what it has not seen)."""
        return self.phase is Phase.PROBING or (self.phase is Phase.DRAFTING and self._k > 0)

    def hold(self, seconds: float, tokens: int, unread: int) -> None:
        """Before a step: the draft would first read ``unread`` tokens for ``seconds``, and the generation may
        still write ``tokens``. Where that reading cannot pay back, the step is plain (:attr:`held`, with the
        words why) and a probe due now waits for the next gap."""
        self.held = None
        if not self.reads or self.worth_reading(seconds, tokens):
            return  # (a free probe and a wake read nothing)
        if self.phase is Phase.PROBING:
            self.phase, self._k, self.since_probe, self.retest_left = Phase.PAUSED, 0, 0, 0
            return  # (the pause's own words stand)
        self.held = (f"the draft would first read {unread} tokens it has not seen ({seconds:.2f} s), more than "
                     f"drafting can save in the {tokens} tokens left — decoding plainly")

    def can_pay(self, t_d: Optional[float] = None) -> bool:
        """Could any K beat plain decoding if the draft were always right (alpha = 1)?"""
        r = self.rates(alpha=1.0, t_d=t_d)
        return max(r[1:]) > r[0] * (1.0 + SWITCH_MARGIN)

    def culprit(self) -> Culprit:
        """What a pause rests on: the verify cost (no K pays even with a free, perfect draft), the draft's cost
        (it would pay with a free one) or acceptance."""
        if self.can_pay():
            return Culprit.ACCEPTANCE
        return Culprit.DRAFT if self.can_pay(t_d=0.0) else Culprit.VERIFY

    def jump(self) -> float:
        """How far the last few passes were from the fit's prediction (the median ratio; 1 = as predicted)."""
        return self.costs.jump()

    @property
    def warm(self) -> bool:
        """Should the draft model read the prompt with the target (untimed prefill)? Yes unless paused on the
        verify or draft cost: then probes need no caught-up draft, and a resumed draft catches up once."""
        return not self.paused or not self.measured() or self.phase is Phase.PROBING \
            or self.culprit() == Culprit.ACCEPTANCE

    # --- choosing ---------------------------------------------------------------------------------------

    def update(self, drafted: int, accepted: int, t_draft: float, t_verify: float, synced: int = 1,
               t_sync: float = 0.0, free: int = 0, tail: int = 0, extra: int = 0) -> None:
        """Record one step (``drafted`` tokens proposed, ``accepted`` kept; ``t_sync`` of ``t_draft``: the draft
        catching up on ``synced`` history tokens first; ``extra``: a tree's branch tokens, also verified) and choose
        the next K. A step that timed :attr:`wake` draft tokens reports their seconds as ``t_draft``, ``drafted`` =
        0. ``free``: the first ``free`` drafted tokens came from another drafter (lookup, ``duo.py``): the pass
        teaches the verify cost, only the tokens after them the draft's acceptance and cost; ``tail``: so did the
        last ``tail`` (lookup took over): kept or not, they say nothing of the draft's."""
        if not self.auto:
            return
        n = drafted + 1 + extra
        drafted, accepted = drafted - tail, min(accepted, drafted - tail)
        drafted, accepted = drafted - free, (accepted - free if accepted >= free else -1)
        if accepted < 0:  # a free token was rejected: the draft's tokens were never judged
            drafted, accepted = 0, 0
        woke = self.wake if not drafted else 0
        seen = self.costs.record(n, t_verify)
        if seen.jump is not None:
            self._remeasured(seen.jump)
        judged = min(accepted + 1, drafted)
        free_probe = self.free_probe  # (a free probe says nothing about the draft model)
        if drafted and not free_probe:
            self.accepted = self.accepted * FORGET_ALPHA + accepted
            self.trials = self.trials * FORGET_ALPHA + judged
        if (drafted and not free_probe) or woke:
            self.costs.record_draft((t_draft - t_sync) / (drafted or woke))
        self.age += 1
        if self.paused:
            self._paused_time += t_verify
        probed = self.probing and (drafted > 0 or woke > 0)
        self.held = None  # (held for one step: the next is weighed again)
        if probed and self.paused and seen.predicted:
            self._debt += t_draft + t_verify - (accepted + 1) * (self.costs.predict(1) or 0.0)  # beyond plain steps
        if self.probing and not probed:  # the probe found nothing to propose: try again next step
            return
        self.phase = Phase.PAUSED if self.phase in PAUSED_PHASES else Phase.DRAFTING  # the probe, if any, is done
        if probed:
            self.age = 0
        self._choose(probed)
        if probed and self.retest_left > 0:
            self.retest_left -= judged
            if self.paused and self.retest_left > 0:
                self._probe(Culprit.ACCEPTANCE)  # the re-test has not judged enough of this text yet: probe again

    def _remeasured(self, jump: float) -> None:
        """The costs were forgotten (timings had moved ``jump`` times from the fit): measure again, a plain step
        then a short draft (acceptance stays)."""
        self.jumped = jump if jump >= BUSY else None
        self.evidence = 0
        if self.paused:
            self._limit = self._busy_words(jump)

    def _choose(self, probed: bool) -> None:
        if not self.costs.plain_seen:
            self.k = 0  # measure a plain pass first
            return
        if not self.measured():
            if self.phase in PAUSED_PHASES:  # costs forgotten while paused (a load change): re-measured by what
                self._probe(Culprit.DRAFT if self.t_d is None else Culprit.VERIFY)  # reads nothing; alpha stays
                return
            self._probe(Culprit.ACCEPTANCE, k=FIRST_K)
            return
        r = self.rates()
        best = self._best(r)
        was = self.phase in PAUSED_PHASES
        pause = r[0] * (1 + SWITCH_MARGIN) > r[best] if not was else r[best] < r[0] * (1 + RESUME_MARGIN)
        if not pause:
            self.phase = Phase.DRAFTING
            self.k, self.gap, self.since_probe, self._limit, self.evidence = best, GAP_MIN, 0, None, 0
            if self.age > STALE:
                self.jumped = None
            return
        self.phase, self.k = Phase.PAUSED, 0
        if not was:
            self.gap, self.since_probe, self.evidence = GAP_MIN, 0, 0
            self._debt = self._paused_time = 0.0
        if probed or not was:
            if probed and self.jumped is None and self.jump() < BUSY:
                self.evidence += 1  # a quiet probe confirmed the pause
            if probed and self.evidence >= CONFIRM:
                self.gap = min(self.gap * 2, GAP_MAX)
            self.since_probe = 0
            self._limit = self._explain()
        if self.jumped is not None and self.age > STALE:
            self.jumped = None  # the busy level has lasted: it is this machine's now
        self.since_probe += 1
        settled = self.evidence >= CONFIRM
        if self.since_probe > self.gap and (not settled or self._debt <= BUDGET * self._paused_time):
            self._probe(self.culprit() if settled else Culprit.ACCEPTANCE)  # re-tests measure all three costs

    def _best(self, rates: list[float]) -> int:
        """The K >= 1 with the highest expected rate."""
        return max(range(1, self.k_max + 1), key=rates.__getitem__)

    def _probe(self, culprit: Culprit, k: int = PROBE_K) -> None:
        """Measure what the pause rests on: the verify cost with a free proposal, the draft's cost by timing
        a short draft that is not proposed, acceptance with the real draft (not paused: the measuring draft)."""
        if culprit == Culprit.VERIFY:
            self.phase, self.k = Phase.FREE_PROBE, 1
        elif culprit == Culprit.DRAFT:
            self.phase, self.k = Phase.WAKING, 0
        else:
            self.phase = Phase.PROBING if self.paused else Phase.MEASURING
            self.k = min(k, self.k_max)

    def begin(self, retest: bool = True) -> None:
        """A new generation starts: the cost estimates carry over; acceptance keeps its estimate but only
        the weight of ``2 * PRIOR_TRIALS`` judged tokens, so the next text soon speaks for itself. A pause
        that rests on few or old measurements is re-tested at the first step, where ``retest`` (the draft's
        reading of the prompt can pay back in this generation: :meth:`worth_reading`)."""
        self.held = None
        keep = min(1.0, 2 * PRIOR_TRIALS / self.trials)
        self.accepted *= keep
        self.trials *= keep
        if retest and self.auto and self.paused and self.measured() and (self.evidence < CONFIRM
                                                                        or self.age > STALE):
            self._probe(Culprit.ACCEPTANCE)  # with the real draft, warmed with the prompt (untimed)

    def retest(self, tokens: int = 1) -> None:
        """Re-test a pause on acceptance at the next step (with the real draft), however often probes have
        confirmed it: for a drafter whose acceptance was measured in conditions that a new text resets. The
        re-test probes step after step until ``tokens`` draft tokens were judged or drafting resumes (one
        probe judges a single token where its first is wrong: a free drafter can afford a few)."""
        if self.auto and self.paused and self.measured() and not self.probing \
                and self.culprit() == Culprit.ACCEPTANCE:
            self._probe(Culprit.ACCEPTANCE)
            self.retest_left = tokens

    # --- explaining -------------------------------------------------------------------------------------

    def limit(self) -> Optional[str]:
        """Why speculation is paused, in words, from the measured alpha, c and v (or why the draft is held this
        step); None while it drafts."""
        return self.held or (self._limit if self.paused else None)

    @staticmethod
    def _busy_words(jump: float) -> str:
        how = f"jumped {jump:.0f}x" if jump >= 1 else f"dropped {1 / jump:.0f}x"
        return f"the CPU looks busy: timings {how}; re-measuring — decoding plainly meanwhile"

    def _explain(self) -> str:
        if self.jumped is not None or self.jump() >= BUSY:
            return self._busy_words(self.jumped or self.jump())
        tv = self.costs.verify()  # the fit's own line (not steepened) with the measured shapes
        t1 = tv(1)
        c = (self.t_d or 0.0) / t1
        r = self.rates()
        if not self.can_pay():  # name the culprit: a draft as dear as the target, a verify as dear as K+1 steps
            n = min(4, self.k_max) + 1
            v = tv(n) / t1
            parts = ([f"a draft token costs {c:.2f} of a target step"] if c >= 0.5 or v <= n / 2 else []) + \
                    ([f"verifying {n} tokens costs {v:.1f} target steps"] if v > n / 2 else [])
            verdict = "however often the draft is right" if self.evidence >= CONFIRM else \
                "as measured so far — re-measuring to be sure"
            return f"{' and '.join(parts)} on this machine: drafting cannot pay here, {verdict} — decoding plainly"
        best = self._best(r)
        v = tv(best + 1) / t1
        cost = f", costs {c:.2f} of a target step per token," if c >= 0.01 else ""  # (lookup costs nothing)
        return (f"the draft agrees with the target {self.alpha:.0%} of the time{cost} and verifying {best + 1} "
                f"tokens costs {v:.1f} steps: the best K ({best}) would run at {r[best] / r[0]:.2f}x — decoding "
                f"plainly until that changes")
