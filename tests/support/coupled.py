"""Seeded outputs under the coupled rule against each other, as the tests compare them.

The coupled rule fixes each position's token as ``argmax_x(log p(x) + g(x))``, the noise ``g`` a function of
(seed, position), so the text does not depend on the drafter. It does depend on ``p``'s last bits, though:
llama.cpp's batched kernels (a verify pass) and its one-token kernels (a plain step) may round differently, and
a near-tie of two perturbed scores can then break the other way (seen on a 2-core CPU: seed 3 of the poem test,
scores 1.2538 and 1.2532, a gap of 0.00066). A divergence passes only there: at the first differing position the
two tokens are the top two of the perturbed scores under plain decoding's logits, within ``NEAR_TIE``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from app.engine.decoding.coupled import gumbel_noise
from app.engine.decoding.sampling import SamplerSettings, distribution, recent_window

NEAR_TIE = 0.01  # perturbed log-probabilities: far above the kernels' rounding, far below a real choice


def parted(pair, prompt: Sequence[int], a: Sequence[int], b: Sequence[int],
           sampler: SamplerSettings) -> Optional[str]:
    """Why seeded outputs ``a`` (plain decoding's) and ``b`` do not count as the same, or None."""
    pos = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if pos is None:
        return None if len(a) == len(b) else f"lengths {len(a)} and {len(b)} with a common prefix"
    history = list(prompt) + list(a[:pos])
    pair.reset()
    logits = pair.target.sync(history)
    p = distribution(logits, sampler, recent_window(history, sampler))
    score = np.full(p.shape[0], -np.inf)
    support = p > 0
    score[support] = np.log(p[support]) + gumbel_noise(sampler.seed, len(history), p.shape[0])[support]
    top = np.argsort(score)[::-1][:2]
    gap = float(score[top[0]] - score[top[1]])
    where = f"parted at token {pos} ({a[pos]} against {b[pos]}, perturbed-score gap {gap:.3g})"
    return None if {a[pos], b[pos]} == {int(t) for t in top} and gap < NEAR_TIE else f"{where}, not a near-tie"
