"""Speculative decoding statistics (``stats.py``): counting hand-made steps, pooling runs, the costs and the speedup
bound they predict. Pure: no models."""

from __future__ import annotations

import pytest

from app.engine.events import StepEvent
from app.engine.stats import Stats, costs, expected_tokens, leviathan_bound, median, pool

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


def step(drafted: int, accepted: int, **kw) -> StepEvent:
    return StepEvent(step=0, drafted=drafted, accepted=accepted, emitted=accepted + 1, t_draft=0.0, t_verify=0.0, k=4,
                     **kw)


def test_each_drafted_position_the_target_judged_is_one_trial():
    stats = Stats()
    for ev in (step(4, 4), step(4, 1), step(3, 0), step(0, 0)):
        stats.add(ev)
    # a full acceptance judged every position and refused none; a rejection at position j judged j + 1 positions
    assert (stats.rejections, stats.spec_steps, stats.steps) == (2, 3, 4)
    assert stats.tested_at == [3, 2, 1, 1] and stats.accepted_at == [2, 1, 1, 1]
    assert stats.histogram == [1, 1, 0, 0, 1]  # steps that accepted 0, 1, … 4 tokens
    assert stats.alpha == 5 / 7 and stats.acceptance_rate == 5 / 11 and stats.mean_gamma == 11 / 3
    assert stats.summary().per_position == [2 / 3, 1 / 2, 1.0, 1.0]


def test_the_reason_of_a_pause_is_kept_only_if_a_step_paused():
    stats = Stats()
    stats.add(step(4, 2))
    stats.end("drafting cannot pay here")
    assert stats.limit is None  # it never paused
    stats.add(step(0, 0, paused=True, limit="the draft rarely agrees with the target"))
    assert stats.limit == "the draft rarely agrees with the target"  # live: the latest pause's
    stats.end(None)
    assert stats.limit == "the draft rarely agrees with the target"
    stats.end("drafting cannot pay here")  # the controller's final word wins
    assert stats.limit == "drafting cannot pay here"


def test_costs_need_a_baseline_and_drafts_and_median_skips_missing_values():
    spec = summary_of(STEPS)
    assert costs(spec, None) == (None, None, None) and costs(summary_of(STEPS[1:2]), 8.0) == (None, None, None)
    c, v, bound = costs(spec, 8.0)
    # c: draft seconds per drafted token, v: seconds per verify pass that drafted, both in plain steps of 1/8 s
    assert (c, v) == pytest.approx((0.09375 / 7 * 8, 0.25 / 2 * 8))
    assert bound == leviathan_bound(spec.alpha, spec.mean_k, c, v)
    assert median([None, 3.0, 1.0, None, 2.0]) == 2.0 and median([None]) is None


def test_a_tree_steps_positions_are_its_chains_depths():
    """A tree's branch tokens count as drafted, but positions (alpha, per position) are the chain's depths: a pass
    that kept its whole chain of 3 beside a branch rejected nothing; one that kept 2 and a branch judged 3."""
    s = Stats()
    s.add(StepEvent(step=0, drafted=4, accepted=3, emitted=4, t_draft=0.0, t_verify=0.1, k=3, tree=1))
    s.add(StepEvent(step=1, drafted=5, accepted=3, emitted=4, t_draft=0.0, t_verify=0.1, k=3, tree=2,
                    branch_hit=True))
    out = s.summary()
    assert out.rejections == 0 and out.tested_at == [2, 2, 2] and out.alpha == 1.0
    assert (out.tree_steps, out.tree_tokens, out.tree_accepted, out.branch_hits, out.mean_path) == (2, 3, 6, 1, 3.0)
    assert out.drafted == 9 and out.acceptance_rate == 6 / 9
    assert out.mean_k == 3.0  # the chain's depth: what K·c prices (a branch token costs the draft no step)


def test_a_trees_draft_cost_is_per_chain_token():
    """c divides the draft's seconds by its chain's tokens: siblings come from logits the chain already read."""
    s = Stats()
    s.add(StepEvent(step=0, drafted=6, accepted=3, emitted=4, t_draft=0.3, t_verify=0.1, k=4, tree=2))
    c, v, _ = costs(s.summary(), 10.0)
    assert c == pytest.approx(0.3 / 4 / 0.1) and v == pytest.approx(1.0)
