"""``runner.stream`` judging two greedy jobs that part: the target's own top-two gap where they part, measured
under the generation lock, so Compare can tell a near-tie (kernels rounding a batched pass and a one-token step
differently) from a fault."""

from __future__ import annotations

import threading

import pytest

from app.engine.loop import GenConfig
from app.lab.parting import NEAR_TIE, divergence
from app.service.chat import compare_payload
from app.service.runner import Job, RunStatus, stream
from app.service.state import AppState
from app.ui.panel import compare_row_html


def _run(state: AppState, jobs, judge: bool):
    prompt = lambda pair: pair.completion_prompt("The three primary colours are")  # noqa: E731
    status, lives = None, []
    for status, lives in stream(state, prompt, jobs, threading.Event(), judge=judge):
        pass
    assert status == RunStatus.DONE
    return lives


def test_two_greedy_jobs_that_part_are_judged_where_they_part(smol_pair):
    state = AppState(pair=smol_pair)
    # the same target, stopped at 6 and at 10 tokens: they part at token 6, where the target's choice is its own
    short, long = Job(GenConfig(max_tokens=6, speculative=False), reset=True), \
        Job(GenConfig(max_tokens=10, k=3), reset=True)
    lives = _run(state, [short, long], judge=True)
    parting = lives[0].parting
    assert parting is not None and parting is lives[1].parting and parting.position == 6
    tokens = smol_pair.completion_prompt("The three primary colours are")
    ref = divergence(smol_pair, tokens, lives[0].done.tokens, lives[1].done.tokens)
    assert parting.gap == pytest.approx(ref["gap"], abs=0.05) and parting.near_tie == (parting.gap < max(NEAR_TIE, parting.rounding))
    payload = compare_payload(lives[0], lives[1], {"temperature": 0.0}, "plain, then speculative")
    assert payload["identical"] is False and payload["first_difference"] == 6
    assert payload["first_difference_gap"] == parting.gap and payload["near_tie"] == parting.near_tie


def test_equal_jobs_and_unjudged_streams_have_no_parting(smol_pair):
    state = AppState(pair=smol_pair)
    # two plain runs: the same kernels, so equal on every machine
    same = [Job(GenConfig(max_tokens=6, speculative=False), reset=True)] * 2
    lives = _run(state, same, judge=True)
    assert lives[0].done.tokens == lives[1].done.tokens and lives[0].parting is None
    lives = _run(state, [Job(GenConfig(max_tokens=6), reset=True), Job(GenConfig(max_tokens=9), reset=True)],
                 judge=False)
    assert lives[0].parting is None


@pytest.mark.parametrize("gap, near_tie, words", [
    (0.0031, True, "identical until a near-tie at token 63"),
    (2.5, False, "outputs differ from token 63 (gap 2.5: not a near-tie)"),
    (None, None, "outputs differ from token 63"),
])
def test_compare_says_whether_a_parting_is_a_near_tie(gap, near_tie, words):
    row = compare_row_html({"plain_tps": 30.0, "spec_tps": 45.0, "speedup": 1.5, "acceptance_rate": 0.8,
                            "mean_accepted": 3.0, "drafted": 10, "identical": False, "first_difference": 62,
                            "first_difference_gap": gap, "near_tie": near_tie, "order": "plain, then speculative"})
    assert words in row
    assert ("tdm-badge-tie" in row) == bool(near_tie)
