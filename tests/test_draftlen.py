"""The auto draft length follows acceptance and costs (pure, simulated steps)."""

from __future__ import annotations

import numpy as np

from app.engine.draftlen import DraftLength
from app.engine.stats import expected_tokens, leviathan_bound


def simulate(alpha: float, t_draft: float, a: float, b: float, steps: int = 200, seed: int = 0) -> DraftLength:
    rng = np.random.default_rng(seed)
    length = DraftLength("auto", k_max=16)
    for _ in range(steps):
        k = length.k
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        length.update(k, accepted, t_draft * k, a + b * (k + 1))
    return length


def rate(alpha: float, k: int, c: float, a: float, b: float) -> float:
    return expected_tokens(alpha, k) / (k * c + a + b * (k + 1))


def test_auto_k_is_within_a_few_percent_of_the_best_fixed_k():
    for alpha, c, a, b in [(0.98, 0.4, 1.0, 0.1), (0.7, 0.4, 1.0, 0.1), (0.9, 0.05, 1.0, 0.01)]:
        length = simulate(alpha, c, a, b)
        assert abs(length.alpha - alpha) < 0.1
        best = max(rate(alpha, k, c, a, b) for k in range(1, 17))
        assert rate(alpha, length.k, c, a, b) >= 0.95 * best, (alpha, c, length.k)


def test_cheap_drafts_and_flat_verification_draft_longer():
    gpu_like = simulate(0.85, t_draft=0.03, a=1.0, b=0.005)
    cpu_like = simulate(0.85, t_draft=0.45, a=1.0, b=0.12)
    assert gpu_like.k > cpu_like.k


def test_fixed_k_never_moves():
    length = DraftLength(5, k_max=16)
    length.update(5, 0, 0.1, 1.0)
    length.update(5, 5, 0.1, 1.0)
    assert length.k == 5


def test_bound_formula():
    assert leviathan_bound(1.0, 4, 0.0, 1.0) == 5.0
    assert abs(expected_tokens(0.5, 1) - 1.5) < 1e-12
