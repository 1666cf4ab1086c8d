"""The figures the panel and Compare derive from a reply (``app/service/speedup.py``): the draft's cost c with
what a drafting pass costs and yields, and two runs of different lengths compared at the same number of
tokens. Pure arithmetic on hand-made summaries."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.stats import expected_tokens
from app.engine.summary import Summary
from app.service import speedup

# The user's reply: 90 % accepted, 4.5 tokens per pass, yet about 1x: each draft token costs most of a target step.
# 100 drafting passes of K = 5 (500 drafted, 450 accepted, 50 rejections), 0.8 s of drafting, 1.2 s verifying,
# and 4 plain (paused) passes of 10 ms each: a target step is 10 ms.
SLOW_DRAFT = Summary(tokens=454, steps=104, drafted=500, accepted=450, acceptance_rate=0.9, mean_accepted=4.37,
                     alpha=450 / 500, mean_k=5.0, rejections=50, spec_steps=100, t_verify_spec=1.2,
                     tokens_per_s=113.5, t_draft=4.0, t_verify=1.24, t_total=4.0,
                     per_position=[1.0, 0.98, 0.95, 0.93, 0.9])


def test_c_and_v_come_from_the_replys_own_plain_steps():
    cost = speedup.draft_costs(SLOW_DRAFT)
    t_step = 0.04 / 4
    assert cost["c"] == pytest.approx(4.0 / 500 / t_step)  # 0.8 of a target step per draft token
    assert cost["v"] == pytest.approx(1.2 / 100 / t_step)
    assert cost["pass_cost"] == pytest.approx(5 * cost["c"] + cost["v"])
    assert cost["tokens"] == pytest.approx(expected_tokens(0.9, 5.0))
    assert cost["predicted"] == pytest.approx(cost["tokens"] / cost["pass_cost"])
    assert cost["predicted"] < 1.0 and "plain steps" in cost["source"]


def test_a_measured_plain_speed_wins_over_the_replys_plain_steps_and_none_without_any():
    claim = {"kind": "measured", "speedup": 1.0, "plain_tps": 50.0, "source": "a plain run of the same prompt"}
    assert speedup.draft_costs(SLOW_DRAFT, claim)["c"] == pytest.approx(4.0 / 500 * 50.0)
    no_plain = replace(SLOW_DRAFT, steps=100, t_verify=1.2)
    assert speedup.draft_costs(no_plain) is None
    stored = speedup.draft_costs(no_plain, None, {"tps": 100.0, "measured_at": "2020-01-01 00:00"})
    assert stored["c"] == pytest.approx(0.8) and "days ago" in stored["source"]
    assert speedup.draft_costs(replace(SLOW_DRAFT, drafted=0, spec_steps=0)) is None


def test_runs_of_different_lengths_are_compared_at_the_same_number_of_tokens():
    # the user's case: plain 100 tokens at 27 tok/s (3.7 s), speculation 60 tokens at 37.5 tok/s (1.6 s)
    cmp = speedup.same_length(100, 27.0, 60, 37.5)
    assert cmp["ratio"] == pytest.approx(37.5 / 27.0)
    assert cmp["n"] == 100 and cmp["plain_s"] == pytest.approx(100 / 27.0)
    assert cmp["saved"] == pytest.approx(100 / 27.0 - 100 / 37.5)
    assert cmp["saved"] / cmp["plain_s"] == pytest.approx(1 - 1 / cmp["ratio"])  # saved and speedup agree
    slower = speedup.same_length(50, 40.0, 50, 20.0)
    assert slower["saved"] == pytest.approx(50 / 40 - 50 / 20) and slower["saved"] < 0
    assert speedup.same_length(0, 40.0, 10, 20.0) is None and speedup.same_length(10, 40.0, 10, 0.0) is None


def test_a_stored_plain_speed_ages_to_the_second():
    import time

    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now - 3))
    assert speedup.age(speedup.stamp_age(stamp, now)) == "just now"  # not "56 s ago" from a minute stamp
    assert speedup.stamp_age("2020-01-01 00:00", now) > 0  # stamps stored before seconds still read
    assert speedup.stamp_age("yesterday", now) is None
