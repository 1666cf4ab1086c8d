"""The completion benchmark's figures as pure functions: percentiles, p50/p95 per mode, p50_ratio, per-prompt
speedups and the prompts flagged below 0.97x, the modes' order and what ended the completions; then a real run on
the coder model with the perfect reference."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.decoding.sampling import SamplerSettings
from app.engine.loop import GenConfig
from app.engine.summary import Summary
from app.lab.fimbench import PLAIN, SLOW, ModeRow, PromptRow, Times, ends, percentile, ratio, rotation, \
    run_requests, slow_prompts, summarize, times
from app.lab.fimrequest import Ending, Request
from app.lab.prompts import Infill, Prompt
from app.lab.replay import PERFECT


def test_percentiles_are_linear_between_ranks():
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5  # order does not matter
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile(list(range(101)), 95) == 95


def test_times_and_ratios():
    t = Times.of([10.0, 12.0, 14.0, 30.0], [1.0, 2.0, 3.0], [0.5, 0.5, 0.7, 0.9])
    assert (t.p50_s, t.ttft_p50_s, t.prefill_p50_s, t.requests) == (13.0, 2.0, 0.6, 4)
    assert t.p95_s == pytest.approx(14.0 + 0.85 * 16.0)
    assert ratio(9.0, 10.0) == 0.9 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


def test_the_flag_is_below_the_floor_only():
    assert SLOW == 0.97
    assert slow_prompts({"a": 0.96, "b": 0.97, "c": 1.4, "d": None}) == ["a"]


def req(total: float, ttft: float, end: Ending = Ending.EOG) -> Request:
    return Request(tokens=[1, 2], total_s=total, ttft_s=ttft, prefill_s=0.5, stats=Summary(), end=end)


def row(pid: str, plain: float, spec: float) -> PromptRow:
    mode = ModeRow(median_s=spec, ttft_s=1.0, tokens=2, end="eog", speedup=plain / spec, slow=plain / spec < SLOW,
                   acceptance_rate=0.5, mean_accepted=1.5, drafted=0, accepted=0, lookup_drafted=0, lookup_accepted=0,
                   paused=None, t_draft_s=0.0, t_verify_s=0.0, identical=True, mismatch=None, runs_s=[spec], steps=[])
    return PromptRow(id=pid, category="fim", prompt="", prompt_tokens=10, tokens=2, end="eog", plain_s=plain,
                     plain_ttft_s=1.0, plain_runs_s=[plain], modes={"auto": mode})


def test_a_mode_summary_gives_p50_ratio_and_the_slow_prompts():
    rows = [row("a", 10.0, 8.0), row("b", 20.0, 21.0), row("c", 30.0, 15.0)]
    plain = times([req(10.0, 1.0), req(20.0, 1.0), req(30.0, 2.0)])
    s = summarize("auto", rows, plain, [req(8.0, 1.0), req(21.0, 0.5), req(15.0, 1.0)])
    assert s.times.p50_s == 15.0 and s.p50_ratio == 15.0 / 20.0
    assert s.p95_ratio == pytest.approx(s.times.p95_s / plain.p95_s)
    assert s.min_speedup == pytest.approx(20.0 / 21.0) and s.slow == ["b"]
    assert s.median_speedup == pytest.approx(1.25) and s.identical and not s.mismatches
    assert s.to_dict()["times"]["p50_s"] == 15.0 and s.other_lengths == []
    assert s.ends == {"eog": 3}


def test_a_parted_completion_of_another_length_is_named():
    rows = [row("a", 10.0, 8.0), row("b", 20.0, 5.0)]
    parted = replace(rows[1].modes["auto"], identical=False, mismatch={"position": 9, "gap": 0.004, "near_tie": True})
    rows[1] = replace(rows[1], tokens=128, modes={"auto": parted})
    s = summarize("auto", rows, times([req(10.0, 1.0), req(20.0, 1.0)]), [req(8.0, 1.0), req(5.0, 1.0)])
    assert not s.identical and s.mismatches == [{"prompt": "b", "position": 9, "gap": 0.004, "near_tie": True,
                                                 "plain_tokens": 128, "tokens": 2}]
    assert [m["prompt"] for m in s.other_lengths] == ["b"]


def test_what_ended_the_requests_is_counted():
    assert ends([req(1.0, 0.1, Ending.SUFFIX), req(1.0, 0.1, Ending.EOG), req(1.0, 0.1, Ending.SUFFIX)]) == \
        {"suffix": 2, "eog": 1}
    assert ends([]) == {}


def test_the_order_rotates_but_the_reference_follows_plain():
    """The reference replays its repeat's plain completion, so it never runs before plain."""
    modes = [PLAIN, "auto", "lookup"]
    assert [rotation(modes, r) for r in range(3)] == [[PLAIN, "auto", "lookup"], ["auto", "lookup", PLAIN],
                                                      ["lookup", PLAIN, "auto"]]
    modes = [PLAIN, "auto", PERFECT]
    assert [rotation(modes, r) for r in range(3)] == [[PLAIN, "auto", PERFECT], ["auto", PLAIN, PERFECT],
                                                      [PLAIN, PERFECT, "auto"]]


# the model writes the loop, then starts copying the suffix's first line: /infill's suffix rule ends it there
LARGEST = Prompt(id="largest", category="fim", infill=Infill(
    "def largest(xs):\n    best = xs[0]\n", "    return best\n\n\nprint(largest([3, 1, 2]))\n"))


def test_the_perfect_reference_replays_plain_and_is_cut_where_plain_is(coder_pair):
    """One prompt, plain, auto (lookup here: the coder alone) and the perfect reference: every completion cut before
    the suffix's copy at the same token, the reference identical to plain with every draft token accepted."""
    gen = GenConfig(max_tokens=24, k_max=16, sampler=SamplerSettings(temperature=0.0))
    r = run_requests(coder_pair, [LARGEST], gen, ["auto"], warmup=False, reference=PERFECT)
    row = r.per_prompt[0]
    assert row.end == "suffix" and row.tokens < 24 and r.plain_ends == {"suffix": 1}
    assert r.named == ["auto", PERFECT] and set(row.modes) == {"auto", PERFECT}
    for name in ("auto", PERFECT):
        m = row.modes[name]
        assert m.identical and m.tokens == row.tokens and m.end == "suffix", name
    perfect = row.modes[PERFECT]
    # passes of 16 draft tokens and the target's own next one: drafting free, verify passes alone
    assert perfect.acceptance_rate == 1.0 and perfect.lookup_drafted == 0
    assert perfect.drafted == row.tokens - row.tokens // 17 and len(perfect.steps) == -(-row.tokens // 17)
    summary = r.modes[PERFECT]
    assert summary.identical and summary.acceptance_rate == 1.0 and summary.p50_ratio is not None
    out = r.to_dict()
    assert out["reference"] == PERFECT and out["k_reference"] == 16 and out["stop_at_suffix"] is True
    assert out["proposers"] == ["auto"] and out["p50_ratio"] == r.modes["auto"].p50_ratio
    assert out["per_prompt"][0]["modes"][PERFECT]["end"] == "suffix" and out["modes"][PERFECT]["ends"] == {"suffix": 1}
