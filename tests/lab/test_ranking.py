"""Recommendations with how far noise reaches (``app/lab/ranking.py``): each cell's repeat range and "within
noise" when the best cell's lead over the next is smaller than it. Pure arithmetic on hand-made cells."""

from __future__ import annotations

import pytest

from app.lab import ranking, tune


def cell(draft: str, k: int, runs: tuple) -> tune.Cell:
    """A cell whose two prompts ran once per repeat with these speedups: runs = ((p1 r1, p1 r2), (p2 r1, p2 r2))."""
    entries = [tune.CellPrompt(id=f"p{i}", category=cat, speedup=sorted(x)[len(x) // 2] if len(x) % 2 else sum(x) / 2,
                               tps=None, baseline_tps=None, acceptance_rate=0.0, mean_accepted=0.0, alpha=0.0,
                               mean_k=0.0, c=None, v=None, bound=None, paused=None, limit=None, runs=x)
               for i, (cat, x) in enumerate(zip(("code", "chat"), runs))]
    return tune.cell_summary(tune.Candidate(draft), k, None, entries, 2)


def test_repeat_range_is_the_spread_of_each_repeats_median_over_the_prompts():
    assert ranking.repeat_speedups([(1.0, 2.0), (3.0, 4.0)]) == [2.0, 3.0]
    assert ranking.repeat_range([(1.0, 2.0), (3.0, 4.0)]) == (2.0, 3.0)
    assert ranking.repeat_range([(1.5,), (1.7,)]) == (None, None)  # one repeat: no range
    assert ranking.repeat_range([(1.0, 2.0, 1.5), (1.0,)]) == (1.0, 2.0)  # a prompt cut short by a cancel
    c = cell("a", 2, ((1.5, 1.8), (1.4, 1.9)))
    assert (c.repeat_min, c.repeat_max) == (pytest.approx(1.45), pytest.approx(1.85))


def test_a_lead_smaller_than_the_repeat_range_is_within_noise():
    # the user's three quick sweeps: 1.65x, 1.38x, 1.68x — settings whose repeats overlap
    noisy = [cell("a", 4, ((1.6, 1.4), (1.7, 1.35))), cell("lookup", 2, ((1.5, 1.45), (1.55, 1.5)))]
    rec = ranking.best_cell(noisy)
    assert rec["draft"] == "a" and rec["within_noise"] is True
    assert rec["next"]["draft"] == "lookup" and rec["repeat_min"] == pytest.approx(1.375)
    words = ranking.noise_words(rec)
    assert "repeats 1.38–1.65x" in words and "within noise" in words and "lookup, K=2" in words
    clear = [cell("a", 4, ((2.0, 2.1), (2.05, 2.0))), cell("lookup", 2, ((1.2, 1.25), (1.2, 1.3)))]
    rec = ranking.best_cell(clear)
    assert rec["within_noise"] is False and "beyond the repeat range" in ranking.noise_words(rec)
    one = [cell("a", 4, ((2.0,), (2.0,))), cell("lookup", 2, ((1.0,), (1.1,)))]
    rec = ranking.best_cell(one)
    assert rec["within_noise"] is None and ranking.noise_words(rec) == ""  # one repeat: nothing claimed
    assert ranking.within_noise(0.05, None, 0.1) is True and ranking.within_noise(0.2, 0.1, None) is False
