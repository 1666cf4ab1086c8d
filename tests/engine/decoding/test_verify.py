"""Exactness of the verification rules on synthetic distributions (chi-squared, fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.decoding.sampling import SamplerSettings, distribution
from app.engine.decoding.verify import greedy_accept, rejection_sample, residual, sample_and_match, sample_from

DRAWS = 20_000
# chi-squared critical values at significance 0.001 by degrees of freedom
CHI2_CRIT = {2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515}


def chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    mask = probs > 0
    expected = probs[mask] * counts.sum()
    assert counts[~mask].sum() == 0, "a token with zero target probability was emitted"
    return float(((counts[mask] - expected) ** 2 / expected).sum()), int(mask.sum() - 1)


CASES = {
    "overlapping": (np.array([0.1, 0.2, 0.3, 0.25, 0.15]), np.array([0.3, 0.3, 0.2, 0.1, 0.1])),
    "q_mass_where_p_has_none": (np.array([0.0, 0.5, 0.3, 0.2, 0.0]), np.array([0.4, 0.1, 0.1, 0.1, 0.3])),
    "p_mass_where_q_has_none": (np.array([0.3, 0.1, 0.2, 0.2, 0.2]), np.array([0.0, 0.6, 0.0, 0.4, 0.0])),
    "identical": (np.array([0.2, 0.2, 0.2, 0.2, 0.2]), np.array([0.2, 0.2, 0.2, 0.2, 0.2])),
}


def _emit(rule: str, p_rows: np.ndarray, q_rows: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    """Run one verification step with a draft sampled from q; return (first, second) emitted tokens."""
    gamma = q_rows.shape[0]
    draft = [sample_from(q_rows[i], rng) for i in range(gamma)]
    if rule == "rejection":
        n, nxt = rejection_sample(p_rows, q_rows, draft, rng)
    elif rule == "deterministic":
        n, nxt = rejection_sample(p_rows, None, draft, rng)
    else:
        n, nxt = sample_and_match(p_rows, draft, rng)
    out = draft[:n] + [nxt]
    return out[0], (out[1] if len(out) > 1 else -1)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("rule", ["rejection", "match", "deterministic"])
def test_emitted_tokens_follow_the_target(case, rule):
    p, q = CASES[case]
    p2 = np.roll(p, 1)  # a different target distribution at the second position
    p_rows = np.stack([p, p2, p])
    q_rows = np.stack([q, np.roll(q, 2)])
    rng = np.random.default_rng(1234)
    first = np.zeros(5, dtype=np.int64)
    second = np.zeros(5, dtype=np.int64)
    for _ in range(DRAWS):
        a, b = _emit(rule, p_rows, q_rows, rng)
        first[a] += 1
        if b >= 0:
            second[b] += 1
    stat, df = chi2(first, p)
    assert stat < CHI2_CRIT[df], f"first token: chi2={stat:.1f} (df={df}) counts={first}"
    # Given an accepted first draft, the second token is distributed as p2 (the targets are position-wise
    # independent here, so its marginal over the runs that reach it is p2).
    stat, df = chi2(second, p2)
    assert stat < CHI2_CRIT[df], f"second token: chi2={stat:.1f} (df={df}) counts={second}"


def test_acceptance_is_higher_with_rejection_sampling_than_matching():
    p, q = CASES["overlapping"]
    rng = np.random.default_rng(7)
    acc = {"rejection": 0, "match": 0}
    for rule in acc:
        for _ in range(5000):
            x = sample_from(q, rng)
            n, _ = (rejection_sample(np.stack([p, p]), q[None], [x], rng) if rule == "rejection"
                    else sample_and_match(np.stack([p, p]), [x], rng))
            acc[rule] += n
    # rejection sampling accepts with probability sum(min(p, q)); matching with sum(p * q)
    assert acc["rejection"] / 5000 == pytest.approx(np.minimum(p, q).sum(), abs=0.03)
    assert acc["match"] / 5000 == pytest.approx((p * q).sum(), abs=0.03)


def test_greedy_accept_counts_the_matching_prefix():
    assert greedy_accept([3, 4, 5], [3, 4, 9, 1]) == 2
    assert greedy_accept([3, 4, 5], [3, 4, 5, 1]) == 3
    assert greedy_accept([], [7]) == 0


def test_residual_is_normalised_and_falls_back_to_p():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    assert residual(p, q) == pytest.approx([0.5, 0.5, 0.0])
    assert residual(p, p) == pytest.approx(p)


def test_sampler_transforms():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    greedy = distribution(logits, SamplerSettings(temperature=0), [])
    assert greedy.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    full = distribution(logits, SamplerSettings(temperature=1.0), [])
    assert full == pytest.approx([0.5, 0.2, 0.15, 0.1, 0.05], abs=1e-6)
    top2 = distribution(logits, SamplerSettings(temperature=1.0, top_k=2), [])
    assert top2 == pytest.approx([5 / 7, 2 / 7, 0, 0, 0], abs=1e-6)
    nucleus = distribution(logits, SamplerSettings(temperature=1.0, top_p=0.8), [])
    assert np.count_nonzero(nucleus) == 3  # 0.5 + 0.2 < 0.8 <= 0.85
    minp = distribution(logits, SamplerSettings(temperature=1.0, min_p=0.25), [])
    assert np.count_nonzero(minp) == 3  # kept: p >= 0.25 * 0.5
    hot = distribution(logits, SamplerSettings(temperature=2.0), [])
    assert hot[0] < 0.5 and hot[4] > 0.05
    penalised = distribution(logits, SamplerSettings(temperature=0, repeat_penalty=10.0), [0])
    assert penalised.argmax() == 1
    with pytest.raises(ValueError, match="top_p"):
        SamplerSettings(top_p=0).validate()
