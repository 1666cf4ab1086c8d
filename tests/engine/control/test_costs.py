"""What a step costs, as auto K learns it (``costs.py``): the fitted line of a target pass, the draft token's lower
median, the paired slope, and a busy machine that is skipped, then re-measured. Pure: timings are made up."""

from __future__ import annotations

import pytest

from app.engine.control.costs import BUSY, PATIENCE, PRIOR_SLOPE, QUIET, TD_WINDOW, CostModel, lower_median


def fitted(a: float = 0.010, b: float = 0.002, passes: int = 40) -> CostModel:
    """A model fed passes of 1 and 9 tokens, each taking exactly ``a + b n`` seconds."""
    m = CostModel(16)
    for i in range(passes):
        n = 1 if i % 2 == 0 else 9
        m.record(n, a + b * n)
    return m


def test_lower_median_takes_the_smaller_middle_sample():
    assert lower_median([]) is None
    assert lower_median([5.0]) == 5.0
    assert lower_median([2.0, 1.0]) == 1.0  # one hiccup among two samples is ignored
    assert lower_median([3.0, 1.0, 2.0]) == 2.0 and lower_median([4.0, 1.0, 3.0, 2.0]) == 2.0


def test_nothing_is_predicted_before_a_pass_and_plain_passes_alone_take_the_prior_slope():
    m = CostModel(16)
    assert m.predict(1) is None and m.t_d is None and not m.measured() and not m.plain_seen
    assert m.record(1, 0.011).predicted is None
    for _ in range(4):
        m.record(1, 0.011)
    a, b = m.line()
    assert b == pytest.approx(PRIOR_SLOPE * a)  # passes that do not vary cannot fit a slope: the prior's
    assert m.predict(1) == pytest.approx(0.011)  # and a plain pass is predicted as measured
    assert m.plain_seen and not m.measured()  # no multi-token pass nor draft cost yet


def test_passes_of_two_sizes_fit_their_line():
    m = fitted(0.010, 0.002)
    assert m.line() == pytest.approx((0.010, 0.002), rel=0.01)
    assert m.predict(5) == pytest.approx(0.020, rel=0.01)
    m.record_draft(0.004)
    assert m.measured()


def test_the_draft_cost_is_the_lower_median_of_the_recent_samples():
    m = CostModel(16)
    assert m.t_d is None  # nothing drafted yet
    m.record_draft(0.0)  # a drafter with no model to time (prompt lookup woken while paused) drafts for free
    assert m.t_d == 0.0
    m = CostModel(16)
    for t in (0.002, 0.003, 0.05):
        m.record_draft(t)
    assert m.t_d == 0.003
    for _ in range(TD_WINDOW):
        m.record_draft(0.001)
    assert m.t_d == 0.001  # only the last TD_WINDOW samples count


def test_the_paired_slope_sets_a_pass_against_the_plain_passes_just_before_it():
    m = CostModel(16)
    for _ in range(5):
        m.record(1, 0.011)
    m.record(5, 0.031)
    assert m.b_paired == pytest.approx((0.031 - 0.011) / 4 / 0.011)  # plain steps per extra token
    a, b = m.line()
    steep_a, steep_b = m.weighed_line(steep=True)
    assert steep_b > b and steep_b == pytest.approx(m.b_paired * (a + b))
    assert steep_a + steep_b == pytest.approx(a + b)  # a plain pass still costs what it was measured at
    assert m.weighed_line(steep=False) == (a, b)


def test_one_slow_pass_counts_at_most_three_predictions():
    clipped, slower = fitted(), fitted()
    p = clipped.predict(1)
    clipped.record(1, 3.0 * p)
    slower.record(1, 3.5 * p)  # slower still, but short of a busy machine
    assert not slower.busy and slower.line() == pytest.approx(clipped.line())


def test_a_busy_machine_is_not_learnt_from_until_it_lasts_then_the_costs_are_measured_afresh():
    m = fitted()
    before = m.line()
    m.record_draft(0.004)
    slow = 10 * m.predict(1)
    seen = m.record(1, slow)
    assert m.busy and seen.jump is None and m.line() == before
    m.record_draft(1.0)  # timed while busy: ignored
    assert m.t_d == 0.004
    for _ in range(PATIENCE - 1):
        assert m.record(1, slow).jump is None
    assert m.line() == before
    seen = m.record(1, slow)  # PATIENCE + 1 busy passes: the new level is the machine's
    assert seen.predicted is None and seen.jump == pytest.approx(10, rel=0.01)
    assert not m.busy and m.t_d is None and m.predict(1) == pytest.approx(slow)  # measured afresh


def test_a_machine_that_got_quiet_again_is_measured_afresh():
    m = fitted()
    fast = m.predict(1) / (2 * BUSY)
    jumps = [m.record(1, fast).jump for _ in range(QUIET)]
    assert jumps[:-1] == [None] * (QUIET - 1) and jumps[-1] < 1 / BUSY  # (the fit learnt the fast passes)
    assert m.predict(1) == pytest.approx(fast)
