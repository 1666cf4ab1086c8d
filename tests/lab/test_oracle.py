"""The hindsight bound for choosing a drafter per step: the shortest path over positions, what lookup keeps
at each position, and what the draft model keeps (its greedy agreement with the output, from one pass)."""

from __future__ import annotations

import pytest

from app.engine.loop import GenConfig, run
from app.lab.oracle import best_time, draft_kept, lookup_kept


def test_the_shortest_path_takes_each_drafter_where_it_keeps_most():
    a, b, t_d = 0.020, 0.004, 0.010
    assert best_time([0] * 5, [0] * 5, a, b, t_d) == pytest.approx(5 * (a + b))  # nothing kept: plain steps
    # lookup keeps 4 at position 0 (one pass for 5 tokens), then nothing: plain for the last one
    assert best_time([4, 0, 0, 0, 0, 0], [0] * 6, a, b, t_d) == pytest.approx((a + 5 * b) + (a + b))
    # the draft model keeps 5 from 0 but pays 5 draft tokens; lookup keeps 2 from 0 and 3 from 3
    lookup, draft = [2, 0, 0, 3, 0, 0], [5, 4, 3, 2, 1, 0]
    both = (a + 3 * b) + (a + 4 * b)  # lookup twice: 6 tokens, no draft time
    assert best_time(lookup, draft, a, b, t_d) == pytest.approx(min(both, 5 * t_d + a + 6 * b))


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
