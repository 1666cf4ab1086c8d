"""How many tokens to draft each step: a fixed K, or ``auto``, which may also choose not to draft at all.

``auto`` picks, before every step, the K that maximises the expected tokens per second under the current
estimates (Leviathan et al., arXiv:2211.17192, Eq. 1 and Thm 3.8, with the verify cost measured rather than
assumed to be one target step), **K = 0 included**:

    K* = argmax_{0 <= K <= K_max}  E(alpha, K) / (K * t_d + t_v(K + 1)),   E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha)

K = 0 is a plain target step (E = 1, cost t_v(1)): when no K can beat it, speculation *steps aside* and the
loop decodes plainly — output unchanged, since plain steps are ordinary target steps.

- ``alpha``: per-token acceptance probability, from the acceptance history (judged positions only), with
  exponential forgetting so it follows the text;
- ``t_d``: measured draft seconds per drafted token, the lower median of the last ``TD_WINDOW`` samples (timing
  noise is one-sided: interference only slows a step); a draft's catch-up on unseen history is timed apart;
- ``t_v(n) = a + b n``: the target's pass time for ``n`` tokens, fitted online by weighted least squares over
  recent passes, plain steps (n = 1) included, with a weak ridge towards ``b = a / 10`` while the passes do
  not yet vary; where passes of a size were seen, that size's own measured shape against a plain step
  (``verifycost.py``: a line misprices a plain step on a CPU and both ends on a GPU).

Measuring first, then choosing: the first step of a fresh controller is plain (t_v(1)), the second drafts
``FIRST_K`` tokens (t_d, alpha and t_v(FIRST_K + 1)); from then on the argmax decides. A pause is a hypothesis:
*probes* re-test it every ``GAP_MIN`` steps with the real draft until ``CONFIRM`` quiet probes agree, then at
exponentially growing gaps (up to ``GAP_MAX``), each re-measuring what the pause rests on (``culprit``):
- where even a perfect draft (alpha = 1) could not pay with a free draft — verify cost rises about one target
  step per token, as on a CPU with a compute-bound target — the probe verifies a *free* proposal (prompt
  lookup: no draft model, no catch-up);
- where the draft's cost is what loses, the draft is *woken*: ``WAKE_K`` draft tokens are timed, not proposed,
  on whatever the draft's cache holds (no catch-up);
- where acceptance limits, the probe drafts with the real proposer.
Probes of a confirmed pause cost under ``BUDGET`` of the paused time (what they cost beyond plain steps, a
catch-up included, is counted). A pause resting on few probes or old ones is re-tested at the next generation.

A busy machine is not a slow pair: a pass ``BUSY`` times slower than predicted is a hiccup and not learnt from;
if that lasts ``PATIENCE`` passes, or passes run ``BUSY`` times faster ``QUIET`` times in a row (the other program
stopped), the costs are forgotten and measured afresh, and a pause taken then says the machine looks busy.

A controller outlives one generation (``Pair`` keeps one per proposer), so what it learnt about this pair on
this machine carries over to the next request: a pair that cannot pay is not re-tried at every message.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192); llama.cpp's ``p_min`` early stop; the
median as a robust location estimate (Huber & Ronchetti, Robust Statistics, 2nd ed., 2009, ch. 3).
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Optional, Union

from app.engine.stats import expected_tokens
from app.engine.control.verifycost import SizeShapes, VerifyCost

PRIOR_ALPHA, PRIOR_TRIALS = 0.9, 4.0  # a weak prior: four judged tokens at 90%
FORGET_ALPHA = 0.9  # per drafted step: acceptance follows the last ~10 steps (acceptance comes in bursts)
FORGET_COST = 0.98  # per step: costs change slowly; older passes fade over ~50 steps
PRIOR_SLOPE = 0.1  # b / a before the passes vary enough to fit the slope
RIDGE = 0.25  # the slope prior's weight, in units of scatter of n (weak: two passes at n = 1, 3 outweigh it)
FIRST_K = 4  # draft length of the first measuring step: long enough to see the verify slope through noise
# Draft length of a later probe while paused: the verify cost seen at 5 tokens, where larger K pays, rather
# than extrapolated from 3 (with 2-token probes, a noisy start once kept the demo pair paused at 0.98x where a
# fixed K = 8 ran 1.21x); 4 draft tokens every 8..256 paused steps.
PROBE_K = FIRST_K
GAP_MIN, GAP_MAX = 8, 256  # paused steps between probes: doubles after each probe that confirms the pause
CONFIRM = 2  # a pause is a hypothesis: re-tested every GAP_MIN steps until this many probes confirmed it
STALE = 512  # steps after which what a pause rests on is old: re-tested at the start of the next generation
WAKE_K = 2  # draft tokens timed (not proposed) to re-measure the draft's cost while the draft limits
TD_WINDOW = 8  # recent draft-cost samples; the estimate is their lower median
BUDGET = 0.02  # confirmed pauses: what probes cost beyond plain steps stays under 2 % of the paused time
SWITCH_MARGIN = 0.02  # draft only where drafting is predicted to gain more than 2 % over a plain step …
RESUME_MARGIN = 0.05  # … and more than 5 % to resume after a pause: a few lucky probes must not start a loss
OUTLIER = 3.0  # a pass slower than this many times the fit's prediction counts as this many (a hiccup)
BUSY = 4.0  # passes this many times slower (or faster) than predicted: the machine got busy (or quiet again)
PATIENCE = 16  # busy passes skipped before the new level is taken as the machine's and re-measured
QUIET = 3  # passes this many times faster than predicted, in a row, before the costs are re-measured
NEAR = 4  # a pass's cost relative to a plain pass at most this many passes before it: its size's shape


class DraftLength:
    """The draft-length controller. Read :attr:`k`, :attr:`free_probe` and :attr:`wake` before a step, then
    report the step with :meth:`update`."""

    def __init__(self, k: Union[int, str], k_max: int):
        self.auto = k == "auto"
        self.k_max = max(1, k_max if self.auto else int(k))
        self.k = 0 if self.auto else int(k)  # a fresh auto controller measures a plain step first
        self.accepted = PRIOR_ALPHA * PRIOR_TRIALS
        self.trials = PRIOR_TRIALS
        self._reset_costs()
        self.paused = False
        self.free_probe = False  # this step's draft should come from a free proposal (prompt lookup)
        self.wake = 0  # draft tokens to time this step without proposing them (re-measures the draft's cost)
        self.gap, self.since_probe = GAP_MIN, 0
        self.probing = False
        self.evidence = 0  # quiet probes that confirmed the current pause
        self.retest_left = 0  # tokens a re-test (retest) still wants judged before the gaps between probes resume
        self.age = 0  # steps since the costs were last measured by a probe
        self._ratios: deque = deque(maxlen=3)  # recent passes: measured time / predicted time
        self._busy = self._quiet = 0  # consecutive passes far slower / faster than predicted
        self.jumped: Optional[float] = None  # the costs were re-measured in a busy spell: timings jumped this much
        self._debt = self._paused_time = 0.0  # what probes cost beyond plain steps; the paused steps' time
        self._limit: Optional[str] = None  # the words for the current pause (recomputed when it changes)

    def _reset_costs(self) -> None:
        self._td: deque = deque(maxlen=TD_WINDOW)  # recent draft seconds per token
        self._w = self._n = self._t = self._nn = self._nt = 0.0  # weighted sums for t_v(n) = a + b n
        self._w1 = self._wm = 0.0  # weights of plain (n = 1) and multi-token passes seen
        self._passes = self._last_multi = 0  # passes added; the number of the last multi-token one
        self._plain: deque = deque(maxlen=2)  # (pass number, seconds) of the last plain passes
        self._paired: deque = deque(maxlen=4)  # verify slopes in plain steps per extra token, each multi-token
        # pass set against the plain passes just before it (so a slow spell of the machine cancels out)
        self._sizes = SizeShapes(self.k_max + 1, FORGET_COST)  # each size's passes over plain ones near them
        self._verify: Optional[tuple] = None  # (passes, paused, VerifyCost): verify()'s last answer

    # --- estimates --------------------------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        return self.accepted / self.trials

    @property
    def t_d(self) -> Optional[float]:
        """Seconds per drafted token: the lower median of recent samples (timing noise only ever slows a
        step, so one hiccup among two samples is ignored)."""
        return lower_median(self._td)

    @property
    def b_paired(self) -> Optional[float]:
        return lower_median(self._paired)

    def verify_cost(self) -> tuple[float, float]:
        """(a, b) of t_v(n) = a + b n: weighted least squares over recent passes, shrunk weakly towards the
        prior slope b = PRIOR_SLOPE * a (ridge), so a single noisy pair of passes cannot swing K."""
        w = self._w
        mean_n, mean_t = self._n / w, self._t / w
        s_nn = self._nn - w * mean_n ** 2  # weighted scatter of n
        s_nt = self._nt - w * mean_n * mean_t
        a0 = mean_t / (1.0 + PRIOR_SLOPE * mean_n)  # intercept if the prior slope held
        b = max(0.0, (s_nt + RIDGE * PRIOR_SLOPE * a0) / (max(s_nn, 0.0) + RIDGE))
        a = max(mean_t - b * mean_n, 1e-6)
        return a, b

    def verify_line(self) -> tuple[float, float]:
        """(a, b) as choices weigh them: the fit's, but while paused the steeper of the fit's and the paired
        slope (resuming must convince both)."""
        a, b = self.verify_cost()
        paired = self.b_paired
        if self.paused and paired is not None and paired * (a + b) > b:
            a, b = max((a + b) * (1 - paired), 1e-6), (a + b) * paired
        return a, b

    def verify(self) -> VerifyCost:
        """``t_v(n)`` as choices weigh it: :meth:`verify_line` with each measured size's shape (``verifycost.py``)."""
        if self._verify is None or self._verify[:2] != (self._passes, self.paused):
            self._verify = (self._passes, self.paused, VerifyCost.of(*self.verify_line(), self._sizes.medians(),
                                                                      self._sizes.weights()))
        return self._verify[2]

    def rates(self, alpha: Optional[float] = None, t_d: Optional[float] = None) -> list[float]:
        """Expected tokens per second for K = 0 .. k_max (K = 0: a plain step), the verify cost as
        :meth:`verify` weighs it."""
        tv = self.verify()
        alpha = min(self.alpha if alpha is None else alpha, 0.999)
        t_d = (self.t_d or 0.0) if t_d is None else t_d
        return [expected_tokens(alpha, k) / (k * t_d + tv(k + 1)) for k in range(self.k_max + 1)]

    def measured(self) -> bool:
        """Enough is known to choose: a plain pass, a multi-token pass and the draft's cost."""
        return self._w1 > 0 and self._wm > 0 and self.t_d is not None

    def can_pay(self, t_d: Optional[float] = None) -> bool:
        """Could any K beat plain decoding if the draft were always right (alpha = 1)?"""
        r = self.rates(alpha=1.0, t_d=t_d)
        return max(r[1:]) > r[0] * (1.0 + SWITCH_MARGIN)

    def culprit(self) -> str:
        """What a pause rests on: "verify" (no K pays even with a free, perfect draft), "draft" (the draft's
        cost: it would pay with a free one) or "acceptance"."""
        if self.can_pay():
            return "acceptance"
        return "draft" if self.can_pay(t_d=0.0) else "verify"

    def jump(self) -> float:
        """How far the last few passes were from the fit's prediction (the median ratio; 1 = as predicted)."""
        return statistics.median(self._ratios) if self._ratios else 1.0

    @property
    def warm(self) -> bool:
        """Should the draft model read the prompt with the target (untimed prefill)? Yes unless paused on the
        verify or draft cost: then probes need no caught-up draft, and a resumed draft catches up once."""
        return not self.paused or not self.measured() or self.probing and not self.free_probe and not self.wake \
            or self.culprit() == "acceptance"

    # --- choosing ---------------------------------------------------------------------------------------

    def update(self, drafted: int, accepted: int, t_draft: float, t_verify: float, synced: int = 1,
               t_sync: float = 0.0, free: int = 0, tail: int = 0) -> None:
        """Record one step (``drafted`` tokens proposed, ``accepted`` kept; ``t_sync`` of ``t_draft``: the
        draft catching up on ``synced`` history tokens first) and choose the next K. A step that timed
        :attr:`wake` draft tokens reports their seconds as ``t_draft`` with ``drafted`` = 0. ``free``: the
        first ``free`` drafted tokens came from another drafter (prompt lookup, ``duo.py``): the pass teaches
        the verify cost, but only the tokens after them the draft's acceptance and cost; ``tail``: so did the
        last ``tail`` (lookup took over from the draft model): kept or not, they say nothing of the draft's."""
        if not self.auto:
            return
        n = drafted + 1
        drafted, accepted = drafted - tail, min(accepted, drafted - tail)
        drafted, accepted = drafted - free, (accepted - free if accepted >= free else -1)
        if accepted < 0:  # a free token was rejected: the draft's tokens were never judged
            drafted, accepted = 0, 0
        woke = self.wake if self.probing and not drafted else 0
        predicted = self._predict(n)
        ratio = t_verify / predicted if predicted else 1.0
        self._ratios.append(ratio)
        self._busy = self._busy + 1 if ratio >= BUSY else 0
        self._quiet = self._quiet + 1 if ratio * BUSY <= 1.0 else 0
        if self._busy > PATIENCE or self._quiet >= QUIET:  # the machine's level changed: what was measured
            self._remeasure()                               # belongs to another machine
            predicted = None
        hiccup = self._busy > 0  # (a busy pass says nothing about this pair's costs until it lasts)
        if not hiccup:  # once the fit stands, one slow pass (a page fault) must not move it far
            self._add_pass(n, min(t_verify, OUTLIER * predicted) if predicted and self._wm > 0 else t_verify)
        judged = min(accepted + 1, drafted)
        if drafted and not self.free_probe:  # a free probe says nothing about the draft model
            self.accepted = self.accepted * FORGET_ALPHA + accepted
            self.trials = self.trials * FORGET_ALPHA + judged
        per_token = (t_draft - t_sync) / (drafted or woke) if (drafted and not self.free_probe) or woke else 0.0
        if per_token > 0 and not hiccup:
            self._td.append(per_token)
        self.age += 1
        if self.paused:
            self._paused_time += t_verify
        probed = self.probing and (drafted > 0 or woke > 0)
        if probed and self.paused and predicted:
            self._debt += t_draft + t_verify - (accepted + 1) * (self._predict(1) or 0.0)  # beyond plain steps
        if self.probing and not probed:  # the probe found nothing to propose: try again next step
            return
        self.probing = self.free_probe = False
        self.wake = 0
        if probed:
            self.age = 0
        self._choose(probed)
        if probed and self.retest_left > 0:
            self.retest_left -= judged
            if self.paused and self.retest_left > 0:
                self._probe("acceptance")  # the re-test has not judged enough of this text yet: probe again

    def _predict(self, n: int) -> Optional[float]:
        if self._w1 == 0 and self._wm == 0:
            return None
        a, b = self.verify_cost()
        return a + b * n

    def _add_pass(self, n: int, t: float) -> None:
        self._w = self._w * FORGET_COST + 1.0
        self._n = self._n * FORGET_COST + n
        self._t = self._t * FORGET_COST + t
        self._nn = self._nn * FORGET_COST + n * n
        self._nt = self._nt * FORGET_COST + n * t
        self._passes += 1
        self._sizes.count(n)
        if n > 1:
            self._wm += 1.0
            before = [t1 for at, t1 in self._plain if at > self._last_multi]  # right before it: the paired slope
            if before:
                t1 = min(before)
                self._paired.append(max(0.0, (t - t1) / (n - 1) / t1))
            near = [t1 for at, t1 in self._plain if self._passes - at <= NEAR]  # a few passes before: its shape
            if near:
                self._sizes.add(n, t / min(near))
            self._last_multi = self._passes
        else:
            self._w1 += 1.0
            self._plain.append((self._passes, t))

    def _remeasure(self) -> None:
        """Timings moved far from the fit for several passes in a row (another program started or stopped):
        forget the costs (acceptance stays) and measure again, a plain step then a short draft."""
        jump = self.jump()
        self._reset_costs()
        self._busy = self._quiet = 0
        self._ratios.clear()
        self.jumped = jump if jump >= BUSY else None
        self.evidence = 0
        if self.paused:
            self._limit = self._busy_words(jump)

    def _choose(self, probed: bool) -> None:
        if self._w1 == 0:
            self.k = 0  # measure a plain pass first
            return
        if not self.measured():
            self._probe("acceptance", k=FIRST_K)
            return
        r = self.rates()
        best = self._best(r)
        was = self.paused
        self.paused = r[0] * (1 + SWITCH_MARGIN) > r[best] if not was else r[best] < r[0] * (1 + RESUME_MARGIN)
        if not self.paused:
            self.k, self.gap, self.since_probe, self._limit, self.evidence = best, GAP_MIN, 0, None, 0
            if self.age > STALE:
                self.jumped = None
            return
        self.k = 0
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
            self._probe(self.culprit() if settled else "acceptance")  # re-tests measure all three costs

    def _best(self, rates: list[float]) -> int:
        """The K >= 1 with the highest expected rate."""
        return max(range(1, self.k_max + 1), key=rates.__getitem__)

    def _probe(self, culprit: str, k: int = PROBE_K) -> None:
        """Measure what the pause rests on: the verify cost with a free proposal, the draft's cost by timing
        a short draft that is not proposed, acceptance with the real draft."""
        self.probing, self.free_probe, self.wake = True, culprit == "verify", 0
        self.k = 1 if culprit == "verify" else min(k, self.k_max)
        if culprit == "draft":
            self.k, self.wake = 0, WAKE_K

    def begin(self) -> None:
        """A new generation starts: the cost estimates carry over; acceptance keeps its estimate but only
        the weight of ``2 * PRIOR_TRIALS`` judged tokens, so the next text soon speaks for itself. A pause
        that rests on few or old measurements is re-tested at the first step."""
        keep = min(1.0, 2 * PRIOR_TRIALS / self.trials)
        self.accepted *= keep
        self.trials *= keep
        if self.auto and self.paused and self.measured() and (self.evidence < CONFIRM or self.age > STALE):
            self._probe("acceptance")  # with the real draft, warmed with the prompt (untimed)

    def retest(self, tokens: int = 1) -> None:
        """Re-test a pause on acceptance at the next step (with the real draft), however often probes have
        confirmed it: for a drafter whose acceptance was measured in conditions that a new text resets. The
        re-test probes step after step until ``tokens`` draft tokens were judged or drafting resumes (one
        probe judges a single token where its first is wrong: a free drafter can afford a few)."""
        if self.auto and self.paused and self.measured() and not self.probing and self.culprit() == "acceptance":
            self._probe("acceptance")
            self.retest_left = tokens

    # --- explaining -------------------------------------------------------------------------------------

    def limit(self) -> Optional[str]:
        """Why speculation is paused, in words, from the measured alpha, c and v; None while it drafts."""
        return self._limit if self.paused else None

    @staticmethod
    def _busy_words(jump: float) -> str:
        how = f"jumped {jump:.0f}x" if jump >= 1 else f"dropped {1 / jump:.0f}x"
        return f"the CPU looks busy: timings {how}; re-measuring — decoding plainly meanwhile"

    def _explain(self) -> str:
        if self.jumped is not None or self.jump() >= BUSY:
            return self._busy_words(self.jumped or self.jump())
        tv = VerifyCost.of(*self.verify_cost(), self._sizes.medians(), self._sizes.weights())
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


def lower_median(samples) -> Optional[float]:
    """The lower median (the middle sample, the smaller of the two middle ones for an even count), None if
    empty: a robust estimate of a cost whose noise is one-sided (interference only ever slows a step)."""
    xs = sorted(samples)
    return xs[(len(xs) - 1) // 2] if xs else None
