"""How many tokens to draft each step: a fixed K, or ``auto``, which may also choose not to draft at all.

``auto`` picks, before every step, the K that maximises the expected tokens per second under the current
estimates (Leviathan et al., arXiv:2211.17192, Eq. 1 and Thm 3.8, with the verify cost measured rather than
assumed to be one target step), **K = 0 included**:

    K* = argmax_{0 <= K <= K_max}  E(alpha, K) / (K * t_d + t_v(K + 1)),   E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha)

K = 0 is a plain target step (E = 1, cost t_v(1)): when no K can beat it, speculation *steps aside* and the
loop decodes plainly — output unchanged, since plain steps are ordinary target steps.

- ``alpha``: per-token acceptance probability, from the acceptance history (judged positions only), with
  exponential forgetting so it follows the text;
- ``t_d``: measured draft seconds per drafted token (a catch-up after a pause is not counted: it is a one-off);
- ``t_v(n) = a + b n``: the target's pass time for ``n`` tokens, fitted online by weighted least squares over
  recent passes, plain steps (n = 1) included, with a weak ridge towards ``b = a / 10`` while the passes do
  not yet vary.

Measuring first, then choosing: the first step of a fresh controller is plain (t_v(1)), the second drafts
``FIRST_K`` tokens (t_d, alpha and t_v(FIRST_K + 1)); from then on the argmax decides. While paused, *probes*
keep the estimates measured, at exponentially growing gaps (``GAP_MIN`` .. ``GAP_MAX`` steps):
- where even a perfect draft (alpha = 1) could not pay — verify cost rises about one target step per token,
  as on a CPU with a compute-bound target — only the verify cost needs watching, so the probe verifies a
  *free* proposal (a prompt-lookup match: no draft model, no catch-up), and the draft model stays asleep;
- otherwise (acceptance is what limits) the probe drafts with the real proposer.

A controller outlives one generation (``Pair`` keeps one per proposer), so what it learnt about this pair on
this machine carries over to the next request: a pair that cannot pay is not re-tried at every message.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192); llama.cpp's ``p_min`` early stop.
"""

from __future__ import annotations

from collections import deque
from typing import Optional, Union

from app.engine.stats import expected_tokens

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
GAP_FREE = 32  # the first gap before a free probe: the verify cost is the machine's and changes slowly
SWITCH_MARGIN = 0.02  # draft only where drafting is predicted to gain more than 2 % over a plain step …
RESUME_MARGIN = 0.05  # … and more than 5 % to resume after a pause: a few lucky probes must not start a loss
OUTLIER = 3.0  # a pass slower than this many times the fit's prediction counts as this many (a hiccup)


class DraftLength:
    """The draft-length controller. Read :attr:`k` (and :attr:`free_probe`) before a step, then report the
    step with :meth:`update`."""

    def __init__(self, k: Union[int, str], k_max: int):
        self.auto = k == "auto"
        self.k_max = max(1, k_max if self.auto else int(k))
        self.k = 0 if self.auto else int(k)  # a fresh auto controller measures a plain step first
        self.accepted = PRIOR_ALPHA * PRIOR_TRIALS
        self.trials = PRIOR_TRIALS
        self.t_d: Optional[float] = None  # seconds per drafted token
        self._w = self._n = self._t = self._nn = self._nt = 0.0  # weighted sums for t_v(n) = a + b n
        self._w1 = self._wm = 0.0  # weights of plain (n = 1) and multi-token passes seen
        self._plain: deque = deque(maxlen=2)  # the plain passes just before this step (cleared by others)
        self.b_paired: Optional[float] = None  # verify slope in plain steps per extra token, each multi-token
        # pass set against the plain passes just before it (so a slow spell of the machine cancels out)
        self.paused = False
        self.free_probe = False  # this step's draft should come from a free proposal (prompt lookup)
        self.gap, self.since_probe = GAP_MIN, 0
        self.probing = False
        self._limit: Optional[str] = None  # the words for the current pause (recomputed when it changes)

    # --- estimates --------------------------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        return self.accepted / self.trials

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

    def rates(self, alpha: Optional[float] = None) -> list[float]:
        """Expected tokens per second for K = 0 .. k_max (K = 0: a plain step). While paused, the verify
        slope is the steeper of the fit's and the paired one: resuming must convince both."""
        a, b = self.verify_cost()
        if self.paused and self.b_paired is not None and self.b_paired * (a + b) > b:
            a, b = max((a + b) * (1 - self.b_paired), 1e-6), (a + b) * self.b_paired
        alpha = min(self.alpha if alpha is None else alpha, 0.999)
        t_d = self.t_d or 0.0
        return [expected_tokens(alpha, k) / (k * t_d + a + b * (k + 1)) for k in range(self.k_max + 1)]

    def measured(self) -> bool:
        """Enough is known to choose: a plain pass, a multi-token pass and the draft's cost."""
        return self._w1 > 0 and self._wm > 0 and self.t_d is not None

    def can_pay(self) -> bool:
        """Could any K beat plain decoding if the draft were always right (alpha = 1)?"""
        r = self.rates(alpha=1.0)
        return max(r[1:]) > r[0] * (1.0 + SWITCH_MARGIN)

    # --- choosing ---------------------------------------------------------------------------------------

    def update(self, drafted: int, accepted: int, t_draft: float, t_verify: float, synced: int = 1) -> None:
        """Record one step (``drafted`` tokens proposed, ``accepted`` kept; ``synced``: tokens the draft
        model had to catch up on first) and choose the next K."""
        if not self.auto:
            return
        n = drafted + 1
        if self._w1 > 0 and self._wm > 0:  # the fit stands: one hiccup (another process, a page fault) must
            a, b = self.verify_cost()      # not move it far
            t_verify = min(t_verify, OUTLIER * (a + b * n))
        self._w = self._w * FORGET_COST + 1.0
        self._n = self._n * FORGET_COST + n
        self._t = self._t * FORGET_COST + t_verify
        self._nn = self._nn * FORGET_COST + n * n
        self._nt = self._nt * FORGET_COST + n * t_verify
        if drafted:
            self._wm += 1.0
            if self._plain:
                t1 = min(self._plain)
                slope = max(0.0, (t_verify - t1) / (n - 1) / t1)
                self.b_paired = slope if self.b_paired is None else 0.5 * self.b_paired + 0.5 * slope
            self._plain.clear()  # pair only with plain passes right before a multi-token one
        else:
            self._w1 += 1.0
            self._plain.append(t_verify)
        if drafted and not self.free_probe:  # a free probe says nothing about the draft model
            judged = min(accepted + 1, drafted)
            self.accepted = self.accepted * FORGET_ALPHA + accepted
            self.trials = self.trials * FORGET_ALPHA + judged
            if synced <= 2:  # a long catch-up after a pause is a one-off cost, not a per-token one
                per_token = t_draft / drafted
                self.t_d = per_token if self.t_d is None else 0.8 * self.t_d + 0.2 * per_token
        probed = self.probing and drafted > 0
        if self.probing and drafted == 0:  # the probe found nothing to propose: try again next step
            return
        self.probing = self.free_probe = False
        self._choose(probed)

    def _choose(self, probed: bool) -> None:
        if self._w1 == 0:
            self.k = 0  # measure a plain pass first
            return
        if not self.measured():
            self._probe(free=False, k=FIRST_K)
            return
        r = self.rates()
        best = self._best(r)
        was = self.paused
        self.paused = r[0] * (1 + SWITCH_MARGIN) > r[best] if not was else r[best] < r[0] * (1 + RESUME_MARGIN)
        if not self.paused:
            self.k, self.gap, self.since_probe, self._limit = best, GAP_MIN, 0, None
            return
        self.k = 0
        free = not self.can_pay()
        if probed or not was:
            self._limit = self._explain()
        if not was:
            self.gap = GAP_FREE if free else GAP_MIN
        if probed:
            self.gap, self.since_probe = min(self.gap * 2, GAP_MAX), 0
        self.since_probe += 1
        if self.since_probe > self.gap:
            self._probe(free=free, k=1 if free else PROBE_K)

    def _best(self, rates: list[float]) -> int:
        """The K >= 1 with the highest expected rate."""
        return max(range(1, self.k_max + 1), key=rates.__getitem__)

    def _probe(self, free: bool, k: int = PROBE_K) -> None:
        self.k, self.probing, self.free_probe = min(k, self.k_max), True, free

    def begin(self) -> None:
        """A new generation starts: the cost estimates carry over; acceptance keeps its estimate but only
        the weight of ``2 * PRIOR_TRIALS`` judged tokens, so the next text soon speaks for itself."""
        keep = min(1.0, 2 * PRIOR_TRIALS / self.trials)
        self.accepted *= keep
        self.trials *= keep

    # --- explaining -------------------------------------------------------------------------------------

    def limit(self) -> Optional[str]:
        """Why speculation is paused, in words, from the measured alpha, c and v; None while it drafts."""
        return self._limit if self.paused else None

    def _explain(self) -> str:
        a, b = self.verify_cost()
        t1 = a + b
        c = (self.t_d or 0.0) / t1
        r = self.rates()
        if not self.can_pay():  # name the culprit: a draft as dear as the target, a verify as dear as K+1 steps
            n = min(4, self.k_max) + 1
            v = (a + b * n) / t1
            parts = ([f"a draft token costs {c:.2f} of a target step"] if c >= 0.5 or v <= n / 2 else []) + \
                    ([f"verifying {n} tokens costs {v:.1f} target steps"] if v > n / 2 else [])
            return (f"{' and '.join(parts)} on this machine: drafting cannot pay here, however often the draft "
                    f"is right — decoding plainly")
        best = self._best(r)
        v = (a + b * (best + 1)) / t1
        cost = f", costs {c:.2f} of a target step per token," if c >= 0.01 else ""  # (lookup costs nothing)
        return (f"the draft agrees with the target {self.alpha:.0%} of the time{cost} and verifying {best + 1} "
                f"tokens costs {v:.1f} steps: the best K ({best}) would run at {r[best] / r[0]:.2f}x — decoding "
                f"plainly until that changes")
