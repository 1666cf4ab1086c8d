"""The combined drafter's arithmetic (control/mix.py): expected tokens of a mixed draft, the choice between
lookup, the draft model, both or nothing, what reading unseen tokens costs, and lookup's acceptance per match
length. Pure functions: no model, milliseconds."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.control.mix import (BUCKETS, FORGET_L, RISK, Choice, LookupAcceptance, LookupRisk, choose, expected_mixed,
                                     hand_over, reading)
from app.engine.control.verifycost import VerifyCost
from app.engine.stats import expected_tokens


def test_expected_tokens_of_a_mixed_draft():
    assert expected_mixed(0.7, 4) == pytest.approx(expected_tokens(0.7, 4))
    assert expected_mixed(0.0, 0, 0.8, 3) == pytest.approx(expected_tokens(0.8, 3))
    # all lookup tokens accepted with probability 0.9^2, then the draft's 0.5 per token
    assert expected_mixed(0.9, 2, 0.5, 2) == pytest.approx(1 + 0.9 + 0.81 + 0.81 * (0.5 + 0.25))


def test_choice_takes_a_long_trusted_match_and_leaves_a_doubtful_one():
    common = dict(k_d=6, alpha_d=0.9, t_d=0.010, t_c=0.003, can_extend=False, k_max=16)
    a, b = 0.022, 0.004  # the demo pair's verify line on this CPU (seconds)
    tv = VerifyCost(a, b)
    copy = choose(tv, alpha_l=0.97, n_avail=16, **common)
    assert copy.lookup >= 12 and copy.draft == 0
    guess = choose(tv, alpha_l=0.3, n_avail=16, **common)
    assert guess == Choice(draft=6, rate=guess.rate)
    # no draft model worth running (paused): lookup or nothing
    assert choose(tv, alpha_l=0.1, n_avail=2, **dict(common, k_d=0)).lookup == 0
    assert choose(tv, alpha_l=0.9, n_avail=8, **dict(common, k_d=0)).lookup > 0
    # a short match whose continuation ends early is extended by a cheap draft model (a dear one: not)
    ext = choose(tv, alpha_l=0.95, n_avail=3, **dict(common, can_extend=True, t_d=0.002))
    assert choose(tv, alpha_l=0.95, n_avail=3, **dict(common, can_extend=True)).draft == 0
    assert ext.lookup == 3 and ext.draft > 0


def test_reading_unseen_tokens_costs_each_one_past_the_first():
    t_s, t_c = 0.017, 0.008
    assert reading(1, t_s, t_c) == 0.0  # the pending token: the first decode reads it
    assert reading(2, t_s, t_c) == pytest.approx(t_s)
    assert reading(1.5, t_s, t_c) == pytest.approx(t_s / 2)  # an expectation: linear in between
    assert reading(20, t_s, t_c) == pytest.approx(t_s + 18 * t_c)


def test_what_the_draft_model_must_read_tips_a_close_call_to_lookup():
    common = dict(alpha_l=0.85, n_avail=16, k_d=16, alpha_d=0.99, t_d=0.010, t_c=0.008, can_extend=False, k_max=16)
    a, b = 0.026, 0.004  # measured on the demo pair (edit-rename): the draft model accepts nearly everything
    tv = VerifyCost(a, b)
    assert choose(tv, **common).draft == 16  # steady state, nothing to read: the draft model
    after_stretch = choose(tv, **common, t_s=0.017, pending=9)  # it must read 9 tokens before it drafts
    assert after_stretch.draft == 0 and after_stretch.lookup > 0


def test_a_return_to_the_draft_model_is_charged_its_catch_up_shared_over_the_steps_it_drafts():
    common = dict(alpha_l=0.0, n_avail=0, k_d=8, alpha_d=0.95, t_d=0.010, t_s=0.017, t_c=0.0075, can_extend=False,
                  k_max=16)
    a, b = 0.023, 0.0045  # the demo pair's verify line (seconds)
    tv = VerifyCost(a, b)
    assert choose(tv, **common, pending=2).draft == 8  # steady state: what the controller chose
    # after a lookup stretch it must first read 9 tokens: worth it only if it then drafts for a while
    spared = choose(tv, **common, pending=12, runs=1)
    assert spared.draft == 0 and spared.lookup == 0 and spared.rate == pytest.approx(1 / (a + b))
    assert choose(tv, **common, pending=12, runs=8).draft == 8
    # plain steps add up what they lost against its drafting
    assert 0 < spared.regret < a + b


def test_a_bucket_tried_little_is_read_optimistically():
    acc = LookupAcceptance()
    assert acc.optimistic(12) > acc.alpha(12) + 0.1  # the prior alone: two judged tokens
    for _ in range(200):
        acc.record(12, 8, 6)  # measured often: 6 of 8 (7 judged) each time
    assert acc.alpha(12) == pytest.approx(6 / 7, abs=0.01)
    assert acc.alpha(12) < acc.optimistic(12) < acc.alpha(12) + 0.05
    assert acc.optimistic(2) < 1.0


def test_lookup_acceptance_is_learnt_per_match_length():
    acc = LookupAcceptance()
    assert acc.alpha(40) > acc.alpha(2)  # the prior trusts long matches more
    for _ in range(30):
        acc.record(40, 10, 0)  # long matches keep failing here
        acc.record(2, 4, 4)
    assert acc.alpha(40) < 0.2 and acc.alpha(2) > 0.8
    assert acc.bucket(BUCKETS[-1] + 100) == len(BUCKETS) - 1 and acc.bucket(0) == 0


def test_lookups_gambles_lose_at_most_their_share_of_the_time_and_grow_as_they_pay():
    """The 1.5B coder target on a 2-core CPU: a plain step 28 ms, a pass of n tokens 39 + 12 (n - 1) ms. A
    request 2.5 s into its prefill may risk a 3-token proposal; each proposal that pays lets the next grow; one
    that breaks shrinks it; and whatever falls, the losses stay within RISK of the time plus the winnings."""
    tv = lambda n: 0.028 if n == 1 else 0.039 + 0.012 * (n - 1)  # noqa: E731
    risk = LookupRisk(started=0.0)
    first = risk.longest(tv, 2.5, 16)
    assert 1 <= first <= 4 and tv(first + 2) - tv(1) > RISK * 2.5
    risk.judged(tv, first, first)  # a copy: all kept
    second = risk.longest(tv, 2.7, 16)
    assert second > first
    for _ in range(2):
        risk.judged(tv, second, second)
        second = risk.longest(tv, 3.0, 16)
    assert second == 16  # a few proposals in, the copy runs at full length
    broken = LookupRisk(started=0.0)
    now, lost = 2.5, 0.0
    for _ in range(50):  # every proposal breaks at its first token
        n = broken.longest(tv, now, 16)
        if n:
            broken.judged(tv, n, 0)
            lost += tv(n + 1) - tv(1)
        now += tv(n + 1)
    assert lost <= RISK * now + 1e-9
