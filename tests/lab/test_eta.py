"""A sweep's time estimate from what this machine measured (``app/lab/eta.py``): the last sweep's pace, else the
pair's plain speed, else none; a running sweep's remaining time at its own pace. Pure arithmetic."""

from __future__ import annotations

import pytest

from app.lab import eta


def test_the_last_sweep_of_the_pair_sets_the_pace():
    last = {"run_id": 7, "duration_s": 60.0, "runs_done": 24, "config": {"max_tokens": 32}}
    seconds, basis = eta.estimate(48, 32, last, plain_tps=100.0)
    assert seconds == pytest.approx(120.0) and "run #7 took 60 s for 24 runs of 32 tokens" in basis
    assert eta.estimate(24, 16, last)[0] == pytest.approx(30.0)  # scales with runs × tokens


def test_without_a_sweep_the_plain_speed_and_without_either_no_figure():
    seconds, basis = eta.estimate(10, 32, None, plain_tps=40.0)
    assert seconds == pytest.approx(8.0) and "plain speed measured here (40.0 tok/s)" in basis
    assert eta.estimate(10, 32, {"duration_s": None}, None) is None
    assert "not estimated yet" in eta.words(None)
    assert eta.words((64.4, "x")) == "≈ 64 s (estimate: x)" and eta.words((150.0, "y")).startswith("≈ 2.5 min")


def test_remaining_time_follows_the_sweeps_own_pace():
    assert eta.remaining(30.0, 10, 40) == pytest.approx(90.0)
    assert eta.remaining(5.0, 0, 40) is None and eta.remaining(50.0, 40, 40) == 0.0
