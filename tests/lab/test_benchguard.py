"""``benchguard.where``: where a slow prompt's speculative time went against plain's, from hand-made steps (the
arithmetic, its parts adding up to the gap, and the line the bench prints). Pure: no models, no timing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.events import StepEvent
from app.lab.benchguard import GUARD, PARTS, flagged, unsteady, where, words

from support.steps import summary_of


def plain_run() -> list[StepEvent]:
    """Ten plain steps: a 0.1 s pass in a 0.11 s step."""
    return [StepEvent(step=i, drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=0.1, k=0, t_step=0.11)
            for i in range(10)]


def spec_steps() -> list[StepEvent]:
    """Twenty tokens, as two plain runs write: one drafting step (with a catch-up), a probe, a free probe
    (prompt lookup's one token, kept), a wake, and 13 paused plain steps a little slower than plain's own."""
    paused = dict(drafted=0, accepted=0, emitted=1, k=0, paused=True, limit="drafting cannot pay here")
    return [StepEvent(step=0, drafted=4, accepted=2, emitted=3, t_draft=0.05, t_verify=0.15, k=4, t_step=0.21,
                      t_sync=0.01),
            StepEvent(step=1, drafted=4, accepted=0, emitted=1, t_draft=0.04, t_verify=0.15, k=4, t_step=0.2,
                      probe=True),
            StepEvent(step=2, drafted=1, accepted=1, emitted=2, t_draft=0.001, t_verify=0.12, k=1, t_step=0.125,
                      probe=True, free_probe=True, lookup=1, lookup_accepted=1),
            StepEvent(step=3, t_draft=0.02, t_verify=0.1, t_step=0.125, wake=True, **paused),
            *[StepEvent(step=4 + i, t_draft=0.0, t_verify=0.11, t_step=0.12, **paused) for i in range(13)]]


def test_the_guard_flags_below_its_floor_only():
    assert GUARD == 0.95
    assert flagged(0.9499) and not flagged(0.95) and not flagged(1.3) and not flagged(None)
    assert flagged(1.3, floor=2.0)


def test_where_splits_the_gap_into_parts_that_add_up():
    w = where(spec_steps(), [summary_of(plain_run()), summary_of(plain_run())])
    approx = lambda x: pytest.approx(x, abs=1e-4)  # noqa: E731  (the figures are rounded to 0.1 ms)
    assert w["runs"] == 2 and w["plain_steps"] == 20 and w["spec_steps"] == 17
    assert w["plain_s"] == approx(2.2) and w["plain_verify_s"] == approx(2.0)
    assert w["spec_s"] == approx(2.22) and w["spec_verify_s"] == approx(1.95) and w["gap_s"] == approx(0.02)
    assert w["paused"] == approx(14 / 17)
    assert (w["draft_passes"], w["plain_passes"]) == (3, 14)
    assert w["draft_passes_s"] == approx(0.42) and w["plain_passes_s"] == approx(1.53)
    assert (w["probes"], w["free_probes"], w["wakes"]) == (2, 1, 1)
    assert (w["lookup_proposed"], w["lookup_kept"]) == (1, 1)
    # a probe's extra: its step against the plain steps (0.11 s each) of the tokens it wrote
    assert w["probe_extra_s"] == approx((0.2 - 0.11) + (0.125 - 2 * 0.11))
    assert w["catch_up_s"] == approx(0.01) and w["wake_s"] == approx(0.02)
    assert w["drafting_s"] == approx(0.05 + 0.04 + 0.001 - 0.01)  # the wake's and the catch-up's apart
    assert w["verify_drafts_s"] == approx(0.42 - 6 * 0.1)  # 6 tokens from 3 passes: they saved 0.18 s
    assert w["plain_steps_s"] == approx(1.53 - 14 * 0.1)  # 14 plain steps, 0.01 s slower each than plain's
    assert w["bookkeeping_s"] == approx((2.22 - 1.95 - 0.111) - (2.2 - 2.0))
    assert sum(w[key] for key, _ in PARTS) == pytest.approx(w["gap_s"], abs=1e-3)


def test_the_words_say_where_the_time_went():
    w = where(spec_steps(), [summary_of(plain_run()), summary_of(plain_run())])
    line = words("code6-parse", 0.92, w)
    assert line.startswith("code6-parse 0.92x (2 runs each): paused 82%; 2 probes cost ")
    assert "(1 free), 1 wakes 0.02 s, catch-ups 0.01 s, drafting 0.08 s" in line
    assert "verify passes 1.95 s against plain's 2.00 s; lookup kept 1 of 1 proposed" in line
    assert "+0.02 s in all: drafting +0.08 s, catch-ups +0.01 s, wakes +0.02 s, " in line
    assert line.endswith("most of it: plain steps against plain's own (timing noise between runs)")


def test_a_run_without_steps_is_described_without_failing():
    w = where([], [summary_of(plain_run())])
    assert w["paused"] is None and w["spec_steps"] == 0 and w["gap_s"] == pytest.approx(-1.1)
    assert "no steps" in words("p", None, w) and "most of it" not in words("p", None, w)


def test_steady_runs_pass_and_a_busy_spell_in_one_mode_is_named():
    plain = [summary_of(plain_run()), summary_of(plain_run())]
    assert unsteady(spec_steps(), plain) is None  # paused passes 0.11 s against plain's 0.1 s: noise
    slow_spell = [StepEvent(step=i, drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=2.0, k=0, t_step=2.1)
                  for i in range(10)]  # another process had the machine: 20x slower
    why = unsteady(spec_steps(), [summary_of(plain_run()), summary_of(slow_spell)])
    assert why is not None and "plain runs went" in why
    busy_spec = [replace(e, t_verify=e.t_verify * 3) if not e.drafted else e for e in spec_steps()]
    why = unsteady(busy_spec, plain)
    assert why is not None and "330.0 ms in the speculative runs and 100.0 ms in plain's" in why
    few = spec_steps()[:6]  # three one-token passes: too few to judge
    assert unsteady([replace(e, t_verify=1.0) if not e.drafted else e for e in few], plain) is None
