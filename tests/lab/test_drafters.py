"""Several proposers in one sitting (``bench --proposer auto,draft,lookup``): interleaved runs on the demo
pair, each proposer's result as bench computes it, and per prompt the better single drafter and auto's share."""

from __future__ import annotations

import argparse

import pytest

from app.cli.bench import proposer_list
from app.engine.loop import GenConfig
from app.lab.drafters import compare_drafters, format_comparison, ratio_interval
from app.lab.prompts import builtin_suite

from support.greedy import assert_bench_greedy


def test_three_proposers_interleaved_and_compared(smol_pair):
    prompts = builtin_suite("edit")[:2]
    seen = []
    c = compare_drafters(smol_pair, prompts, GenConfig(max_tokens=8), ("auto", "draft", "lookup"), repeats=2,
                         warmup=False, progress=lambda done, total, what: seen.append(what))
    assert len(seen) == 2 * 2 * 4  # prompts x repeats x (plain + 3)
    assert seen[:4] == [f"{prompts[0].id} {m}" for m in ("plain", "auto", "draft", "lookup")]
    assert seen[4:8] == [f"{prompts[0].id} {m}" for m in ("auto", "draft", "lookup", "plain")]  # rotated
    assert list(c.results) == ["auto", "draft", "lookup"]
    for name, r in c.results.items():
        assert r.proposer == name and len(r.per_prompt) == 2
        assert_bench_greedy(bool(r.identical), r.mismatches)
        assert [p.plain_runs for p in r.per_prompt] == [p.plain_runs for p in c.results["auto"].per_prompt]
    assert c.results["auto"].lookup_index_bytes and c.results["draft"].lookup_index_bytes is None
    for row in c.rows:
        single = {p: row.speedups[p] for p in ("draft", "lookup")}
        assert row.best_single == max(single, key=single.__getitem__)
        assert row.auto_ratio == pytest.approx(row.speedups["auto"] / single[row.best_single])
    for row in c.rows:  # the hindsight bound, where auto K had measured its costs
        assert row.bound is None or row.bound > 0 and row.bound_gain >= 1.0
    table = format_comparison(c)
    assert "auto/best" in table and "median" in table and "output identical to plain: auto " in table
    assert "auto's median speedup / the better single drafter's median" in table
    best = max(c.results["draft"].speedup, c.results["lookup"].speedup)
    assert c.median_ratio == pytest.approx(c.results["auto"].speedup / best)
    assert set(c.to_dict()) == {"proposers", "per_prompt", "auto_ratio", "auto_ratio_min", "median_ratio", "partial"}


def test_with_one_single_drafter_auto_is_compared_with_it_and_without_auto_not_at_all(smol_pair):
    prompt = builtin_suite("edit")[:1]
    c = compare_drafters(smol_pair, prompt, GenConfig(max_tokens=4), ("auto", "draft"), warmup=False)
    row = c.rows[0]
    assert row.best_single == "draft" and row.auto_ratio == pytest.approx(row.speedups["auto"] / row.speedups["draft"])
    singles = compare_drafters(smol_pair, prompt, GenConfig(max_tokens=4), ("draft", "lookup"), warmup=False)
    assert singles.auto_ratio is None and "auto/best" not in format_comparison(singles)


def test_the_proposer_list_is_checked():
    assert proposer_list("auto,draft,lookup") == ("auto", "draft", "lookup")
    assert proposer_list("draft") == ("draft",)
    for bad in ("auto,auto", "auto,nope", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            proposer_list(bad)


def test_the_range_of_auto_over_the_better_single_drafter_comes_from_the_repeats():
    assert ratio_interval([50.0, 51.0], [[40.0, 41.0, 42.0]]) is None  # under 3 runs: no range
    steady = ratio_interval([50.0] * 3, [[40.0] * 3, [25.0] * 3])
    assert steady == pytest.approx((1.25, 1.25))  # runs that never vary: the point itself
    low, high = ratio_interval([48.0, 50.0, 52.0, 70.0], [[40.0, 41.0, 42.0], [30.0, 60.0, 44.0]])
    assert low <= 50.0 / 44.0 <= high and high < 70.0 / 30.0  # the point inside; each draw's best single
    assert ratio_interval([48.0, 50.0, 52.0], [[40.0, 41.0, 42.0]]) == ratio_interval([48.0, 50.0, 52.0],
                                                                                      [[40.0, 41.0, 42.0]])
