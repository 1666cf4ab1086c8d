"""What a step costs on this machine, as auto K (``draftlen.py``) learns it from the passes the loop reports.

- ``t_d``: draft seconds per drafted token, the lower median of the last ``TD_WINDOW`` samples (timing noise is
  one-sided: interference only slows a step); a draft's catch-up on unseen history is timed apart;
- ``t_v(n) = a + b n``: the target's pass time for ``n`` tokens, fitted online by weighted least squares over
  recent passes, plain steps (n = 1) included, with a weak ridge towards ``b = a / 10`` while the passes do
  not yet vary; where passes of a size were seen, that size's own measured shape against a plain step
  (``verifycost.py``: a line misprices a plain step on a CPU and both ends on a GPU). While paused the choices
  weigh the steeper of the fit's slope and the *paired* one (each multi-token pass against the plain passes
  just before it, so a slow spell of the machine cancels out): resuming must convince both.

A busy machine is not a slow pair: a pass ``BUSY`` times slower than predicted is a hiccup and not learnt from;
if that lasts ``PATIENCE`` passes, or passes run ``BUSY`` times faster ``QUIET`` times in a row (the other program
stopped), the costs are forgotten and measured afresh (:meth:`CostModel.record` says so, with the jump).

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192), Eq. 1 and Thm 3.8 with the verify cost
measured rather than assumed to be one target step; the median as a robust location estimate (Huber &
Ronchetti, Robust Statistics, 2nd ed., 2009, ch. 3).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Optional

from app.engine.control.verifycost import SizeShapes, VerifyCost

FORGET_COST = 0.98  # per step: costs change slowly; older passes fade over ~50 steps
PRIOR_SLOPE = 0.1  # b / a before the passes vary enough to fit the slope
RIDGE = 0.25  # the slope prior's weight, in units of scatter of n (weak: two passes at n = 1, 3 outweigh it)
TD_WINDOW = 8  # recent draft-cost samples; the estimate is their lower median
OUTLIER = 3.0  # a pass slower than this many times the fit's prediction counts as this many (a hiccup)
BUSY = 4.0  # passes this many times slower (or faster) than predicted: the machine got busy (or quiet again)
PATIENCE = 16  # busy passes skipped before the new level is taken as the machine's and re-measured
QUIET = 3  # passes this many times faster than predicted, in a row, before the costs are re-measured
NEAR = 4  # a pass's cost relative to a plain pass at most this many passes before it: its size's shape


@dataclass(frozen=True)
class Seen:
    """What :meth:`CostModel.record` made of one target pass."""

    predicted: Optional[float]  # the seconds the fit expected (None: no fit yet, or the costs were just forgotten)
    jump: Optional[float]  # the costs were forgotten, the machine's level having moved this much (median ratio)


class CostModel:
    """The costs of a draft token and of target passes up to ``n_max`` tokens: fed by :meth:`record` and
    :meth:`record_draft`, read through :attr:`t_d`, :meth:`verify` and :meth:`predict`."""

    def __init__(self, n_max: int):
        self.n_max = n_max
        self._ratios: deque = deque(maxlen=3)  # recent passes: measured time / predicted time
        self.forget()

    def forget(self) -> None:
        """Forget every cost (another machine's, or this one's before its load changed)."""
        self._td: deque = deque(maxlen=TD_WINDOW)  # recent draft seconds per token
        self._w = self._n = self._t = self._nn = self._nt = 0.0  # weighted sums for t_v(n) = a + b n
        self._w1 = self._wm = 0.0  # weights of plain (n = 1) and multi-token passes seen
        self._passes = self._last_multi = 0  # passes added; the number of the last multi-token one
        self._plain: deque = deque(maxlen=2)  # (pass number, seconds) of the last plain passes
        self._paired: deque = deque(maxlen=4)  # verify slopes in plain steps per extra token, each multi-token
        # pass set against the plain passes just before it (so a slow spell of the machine cancels out)
        self._sizes = SizeShapes(self.n_max, FORGET_COST)  # each size's passes over plain ones near them
        self._verify: Optional[tuple] = None  # (passes, steep, VerifyCost): verify()'s last answer
        self._busy = self._quiet = 0  # consecutive passes far slower / faster than predicted
        self._ratios.clear()

    # --- estimates --------------------------------------------------------------------------------------

    @property
    def t_d(self) -> Optional[float]:
        """Seconds per drafted token: the lower median of recent samples (timing noise only ever slows a
        step, so one hiccup among two samples is ignored)."""
        return lower_median(self._td)

    @property
    def b_paired(self) -> Optional[float]:
        return lower_median(self._paired)

    @property
    def plain_seen(self) -> bool:
        return self._w1 > 0

    @property
    def busy(self) -> bool:
        """The last pass ran far slower than predicted: what is timed now says nothing of this pair."""
        return self._busy > 0

    def measured(self) -> bool:
        """Enough is known to choose: a plain pass, a multi-token pass and the draft's cost."""
        return self._w1 > 0 and self._wm > 0 and self.t_d is not None

    def line(self) -> tuple[float, float]:
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

    def weighed_line(self, steep: bool) -> tuple[float, float]:
        """(a, b) as choices weigh them: the fit's; ``steep`` (while paused), the steeper of the fit's and the
        paired slope, so that resuming must convince both."""
        a, b = self.line()
        paired = self.b_paired
        if steep and paired is not None and paired * (a + b) > b:
            a, b = max((a + b) * (1 - paired), 1e-6), (a + b) * paired
        return a, b

    def verify(self, steep: bool = False) -> VerifyCost:
        """``t_v(n)`` as choices weigh it: :meth:`weighed_line` with each measured size's shape
        (``verifycost.py``)."""
        if self._verify is None or self._verify[:2] != (self._passes, steep):
            self._verify = (self._passes, steep, VerifyCost.of(*self.weighed_line(steep), self._sizes.medians(),
                                                               self._sizes.weights()))
        return self._verify[2]

    def predict(self, n: int) -> Optional[float]:
        """The fit's seconds for a pass of ``n`` tokens; None before any pass."""
        if self._w1 == 0 and self._wm == 0:
            return None
        a, b = self.line()
        return a + b * n

    def jump(self) -> float:
        """How far the last few passes were from the fit's prediction (the median ratio; 1 = as predicted)."""
        return statistics.median(self._ratios) if self._ratios else 1.0

    # --- learning ---------------------------------------------------------------------------------------

    def record(self, n: int, seconds: float) -> Seen:
        """Learn from a target pass over ``n`` tokens that took ``seconds``, unless the machine looks busy; where
        timings have moved far from the fit for several passes in a row (another program started or stopped),
        forget the costs first: they belong to another machine."""
        predicted = self.predict(n)
        ratio = seconds / predicted if predicted else 1.0
        self._ratios.append(ratio)
        self._busy = self._busy + 1 if ratio >= BUSY else 0
        self._quiet = self._quiet + 1 if ratio * BUSY <= 1.0 else 0
        jump = None
        if self._busy > PATIENCE or self._quiet >= QUIET:
            jump = self.jump()
            self.forget()
            predicted = None
        if not self.busy:  # once the fit stands, one slow pass (a page fault) must not move it far
            self._add_pass(n, min(seconds, OUTLIER * predicted) if predicted and self._wm > 0 else seconds)
        return Seen(predicted, jump)

    def record_draft(self, per_token: float) -> None:
        """Learn a draft token's seconds (nothing while the machine looks busy); 0 from a drafter with no model
        to time (prompt lookup woken while paused: time_tokens)."""
        if per_token >= 0 and not self.busy:
            self._td.append(per_token)

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


def lower_median(samples: Iterable[float]) -> Optional[float]:
    """The lower median (the middle sample, the smaller of the two middle ones for an even count), None if
    empty: a robust estimate of a cost whose noise is one-sided (interference only ever slows a step)."""
    xs = sorted(samples)
    return xs[(len(xs) - 1) // 2] if xs else None
