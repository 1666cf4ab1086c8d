"""Speculative decoding statistics (``stats.py``): pooling runs, and the speedup bound they predict. Pure: no
models."""

from __future__ import annotations

from app.engine.stats import expected_tokens, leviathan_bound, pool

from support.steps import STEPS, summary_of


def test_pool_sums_counters_and_recomputes_rates():
    pooled = pool([summary_of(STEPS, 8.0), summary_of(STEPS[:1] + STEPS[2:])])
    assert (pooled.drafted, pooled.accepted, pooled.rejections, pooled.spec_steps, pooled.steps, pooled.tokens) == \
        (14, 10, 2, 4, 5, 15)
    assert (pooled.t_draft, pooled.t_verify, pooled.t_verify_spec, pooled.paused_steps, pooled.probe_steps) == \
        (0.1875, 0.5625, 0.5, 1, 2)
    assert (pooled.alpha, pooled.acceptance_rate, pooled.mean_accepted, pooled.mean_k) == \
        (0.8333333333333334, 0.7142857142857143, 3.0, 3.5)
    assert (pooled.tested_at, pooled.accepted_at, pooled.histogram, pooled.per_position) == \
        ([4, 4, 4], [4, 4, 2], [0, 0, 2, 2], [1.0, 1.0, 0.5])
    assert pooled.limit == "drafting cannot pay here" and pooled.paused_share == 0.2
    assert (pooled.baseline_tps, pooled.speedup, pooled.bound) == (None, None, None)  # pooled without a baseline


def test_bound_formula():
    assert leviathan_bound(1.0, 4, 0.0, 1.0) == 5.0
    assert abs(expected_tokens(0.5, 1) - 1.5) < 1e-12
