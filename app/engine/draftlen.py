"""How many tokens to draft each step: a fixed K, or ``auto``.

``auto`` picks, before every step, the K that maximises the expected tokens per second under the current
estimates (Leviathan et al., arXiv:2211.17192, Eq. 1 and Thm 3.8, with the verify cost measured rather than
assumed to be one target step):

    K* = argmax_{1 <= K <= K_max}  E(alpha, K) / (K * t_d + t_v(K + 1)),   E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha)

- ``alpha``: the per-token acceptance probability, from the acceptance history (judged positions only),
  with exponential forgetting so it follows the text (code drafts well, free prose less);
- ``t_d``: measured draft seconds per drafted token;
- ``t_v(n) = a + b n``: the target's verify time for ``n`` tokens, fitted online by weighted least squares
  over recent passes. Before the passes vary enough to fit a slope, ``b = a / 10`` (a 2-core CPU measures
  ~0.1 of a step per extra token; a GPU is flatter, and the fit takes over within a few steps).

So a cheap draft and a flat verify cost (GPUs) push K up; a costly draft, a steep verify cost (CPUs) or a low
acceptance pull it down. The draft model proposer may stop a draft early (``p_min``, llama.cpp's rule).
"""

from __future__ import annotations

from typing import Union

from app.engine.stats import expected_tokens

PRIOR_ALPHA, PRIOR_TRIALS = 0.9, 4.0  # a weak prior: four judged tokens at 90%
FORGET_ALPHA = 0.9  # per step: acceptance follows the last ~10 steps (acceptance comes in bursts)
FORGET_COST = 0.98  # per step: costs change slowly; older passes fade over ~50 steps
PRIOR_SLOPE = 0.1  # b / a before the verify passes vary enough to fit the slope
PRIOR_WEIGHT = 8.0  # the slope prior counts as this many passes (timings are noisy on shared machines)


class DraftLength:
    def __init__(self, k: Union[int, str], k_max: int, k_start: int = 8):
        self.auto = k == "auto"
        self.k_max = max(1, k_max if self.auto else int(k))
        self.k = min(k_start, self.k_max) if self.auto else int(k)
        self.accepted = PRIOR_ALPHA * PRIOR_TRIALS
        self.trials = PRIOR_TRIALS
        self.t_d = None  # seconds per drafted token
        self._w = self._n = self._t = self._nn = self._nt = 0.0  # weighted sums for t_v(n) = a + b n

    @property
    def alpha(self) -> float:
        return self.accepted / self.trials

    def update(self, drafted: int, accepted: int, t_draft: float, t_verify: float) -> None:
        """Record one step (``drafted`` tokens proposed, ``accepted`` kept) and choose the next K."""
        if not self.auto or drafted == 0:
            return
        judged = min(accepted + 1, drafted)
        self.accepted = self.accepted * FORGET_ALPHA + accepted
        self.trials = self.trials * FORGET_ALPHA + judged
        per_token = t_draft / drafted
        self.t_d = per_token if self.t_d is None else 0.8 * self.t_d + 0.2 * per_token
        n = drafted + 1
        self._w = self._w * FORGET_COST + 1.0
        self._n = self._n * FORGET_COST + n
        self._t = self._t * FORGET_COST + t_verify
        self._nn = self._nn * FORGET_COST + n * n
        self._nt = self._nt * FORGET_COST + n * t_verify
        self.k = self.best_k()

    def verify_cost(self) -> tuple[float, float]:
        """(a, b) of t_v(n) = a + b n: weighted least squares over recent passes, shrunk towards the prior
        slope b = PRIOR_SLOPE * a (ridge), so a few noisy passes cannot swing K."""
        w = self._w
        mean_n, mean_t = self._n / w, self._t / w
        s_nn = self._nn - w * mean_n ** 2  # weighted scatter of n
        s_nt = self._nt - w * mean_n * mean_t
        a0 = mean_t / (1.0 + PRIOR_SLOPE * mean_n)  # intercept if the prior slope held
        lam = PRIOR_WEIGHT * 4.0  # prior strength, in units of scatter (n varying by ~2)
        b = max(0.0, (s_nt + lam * PRIOR_SLOPE * a0) / (s_nn + lam))
        a = max(mean_t - b * mean_n, 1e-6)
        return a, b

    def best_k(self) -> int:
        a, b = self.verify_cost()
        alpha = min(self.alpha, 0.999)
        rates = [(expected_tokens(alpha, k) / (k * self.t_d + a + b * (k + 1)), k)
                 for k in range(1, self.k_max + 1)]
        return max(rates)[1]
