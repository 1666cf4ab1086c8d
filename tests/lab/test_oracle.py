"""The hindsight bound for choosing a drafter per step: the shortest path over positions, what lookup keeps
at each position, and what the draft model keeps (its greedy agreement with the output, from one pass)."""

from __future__ import annotations

import pytest

from app.engine.loop import GenConfig, run
from app.engine.control.verifycost import VerifyCost
from app.lab.oracle import StepCosts, best_time, draft_kept, lookup_kept


def test_the_shortest_path_takes_each_drafter_where_it_keeps_most():
    a, b, t_d = 0.020, 0.004, 0.010
    free = StepCosts(VerifyCost(a, b), t_d)  # reading history costs the draft model nothing
    assert best_time([0] * 5, [0] * 5, free) == pytest.approx(5 * (a + b))  # nothing kept: plain steps
    # lookup keeps 4 at position 0 (one pass for 5 tokens), then nothing: plain for the last one
    assert best_time([4, 0, 0, 0, 0, 0], [0] * 6, free) == pytest.approx((a + 5 * b) + (a + b))
    # the draft model keeps 5 from 0 but pays 5 draft tokens; lookup keeps 2 from 0 and 3 from 3
    lookup, draft = [2, 0, 0, 3, 0, 0], [5, 4, 3, 2, 1, 0]
    both = 2 * (a + 3 * b)  # lookup twice, 2 tokens each (the third would pass the end): 6, no draft time
    assert best_time(lookup, draft, free) == pytest.approx(min(both, 5 * t_d + a + 6 * b))


def test_the_draft_model_pays_for_what_it_reads():
    a, b, t_d, t_s, t_c = 0.020, 0.004, 0.010, 0.012, 0.007
    tv = VerifyCost(a, b)
    # drafting 3 twice, all kept: the second draft first reads its own last token and the bonus (t_s)
    twice = 2 * (3 * t_d + a + 4 * b) + t_s
    assert best_time([0] * 8, [3, 0, 0, 0, 3, 0, 0, 0], StepCosts(tv, t_d, t_s, t_c)) == pytest.approx(twice)
    # … or drafting one more that the target corrects leaves one token to read (free): cheaper when t_s is dear
    dear = StepCosts(tv, t_d, t_s=0.050, t_c=t_c)
    corrected = (4 * t_d + a + 5 * b) + (3 * t_d + a + 4 * b)
    assert best_time([0] * 8, [3, 0, 0, 0, 3, 0, 0, 0], dear) == pytest.approx(corrected)
    # after a lookup stretch of 6 tokens the draft model must read 7 (t_s + 5 t_c)
    lookup, draft = [5, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 2, 1, 0]
    step = best_time(lookup, draft, StepCosts(tv, t_d, t_s, t_c))
    after = 2 * t_d + a + 3 * b
    assert step == pytest.approx(min(a + 6 * b + t_s + 5 * t_c + after, a + 6 * b + 3 * (a + b)))
    # the draft model extends lookup's match past its end (a dear pass): it reads lookup's 5 tokens first
    dear_pass = StepCosts(VerifyCost(0.05, b), t_d, t_s, t_c)
    ext = best_time([5, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 2, 1, 0], dear_pass)
    assert ext == pytest.approx(t_s + 4 * t_c + 2 * t_d + 0.05 + 8 * b)


def test_the_draft_model_hands_over_to_lookup_within_a_step():
    a, b, t_d = 0.020, 0.004, 0.010
    free = StepCosts(VerifyCost(a, b), t_d)
    # an edit of 2 tokens at 0 that only the draft model gets, then a copy of 8 that lookup keeps from 2
    lookup, draft = [0, 0, 8] + [0] * 8, [2, 1] + [0] * 9
    handoff = 2 * t_d + a + 11 * b  # one pass: 2 draft tokens, lookup's 8, a bonus (11 tokens emitted)
    apart = (2 * t_d + a + 3 * b) + (a + 9 * b)  # a draft step (3 tokens), then a lookup step (9)
    assert handoff < apart and best_time(lookup, draft, free) == pytest.approx(handoff)


def test_lookup_keeps_what_repeats():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    output = [2, 3, 4, 5, 9, 2, 3]
    # at 2 the tail "2 3" was seen in the prompt, followed by 4 5 (kept) 6 (the output has 9); at 3, "3 4" -> 5
    assert lookup_kept(prompt, output, k_max=16) == [0, 0, 2, 1, 0, 0, 0]
    assert lookup_kept(prompt + [2, 3], [4, 5, 6, 1], k_max=2)[0] == 2  # "2 3" -> 4 5 6 …, capped at 2


def test_the_draft_model_keeps_its_own_greedy_output(smol_pair):
    smol_pair.reset()
    prompt = smol_pair.target.tokenize("The three primary colours are")
    output, _ = run(smol_pair.draft, prompt, GenConfig(max_tokens=12, speculative=False))
    kept = draft_kept(smol_pair, prompt, output, k_max=8)
    assert kept == [min(len(output) - i, 8) for i in range(len(output))]
    changed = list(output)
    changed[5] = (changed[5] + 1) % 1000  # a token the draft model would not choose there
    kept = draft_kept(smol_pair, prompt, changed, k_max=8)
    assert kept[5] == 0 and kept[0] == 5
