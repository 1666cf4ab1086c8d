"""Prompt lookup (drafters/lookup.py) on token lists: the continuation of the latest earlier occurrence of the
history's last n-gram, longest n first, at most k tokens, every token marked as lookup's. No model."""

from __future__ import annotations

import numpy as np

from app.engine.decoding.sampling import SamplerSettings
from app.engine.drafters.lookup import PromptLookupProposer

RNG = np.random.default_rng(0)


def _propose(history, k=4, **kw):
    lookup = PromptLookupProposer(**kw)
    lookup.begin(history)
    return lookup.propose(history, k, SamplerSettings(), RNG, False)


def test_it_proposes_what_followed_the_last_bigram_before():
    draft = _propose([5, 6, 7, 8, 9, 1, 5, 6], k=3)
    assert draft.tokens == [7, 8, 9] and draft.lookup == 3 and draft.q is None
    assert draft.probs == [None] * 3 and all(draft.from_lookup(i) for i in range(3))


def test_the_latest_occurrence_and_the_longest_match_win():
    assert _propose([1, 2, 3, 1, 2, 4, 0, 1, 2], k=1).tokens == [4]  # the latest "1 2" was followed by 4
    assert _propose([9, 2, 3, 7, 1, 2, 3, 8, 9, 2, 3], k=1).tokens == [7]  # "9 2 3" beats the later "2 3"


def test_no_match_and_a_single_token_match_propose_nothing():
    assert _propose([1, 2, 3, 4]).tokens == []
    assert _propose([1, 2, 3, 1]).tokens == []  # a unigram is too unreliable to pay for its verification


def test_the_index_grows_with_the_history_across_calls():
    lookup = PromptLookupProposer()
    history = [3, 4, 5, 6]
    lookup.begin(history)
    assert lookup.propose(history, 2, SamplerSettings(), RNG, False).tokens == []
    history += [3, 4]
    assert lookup.propose(history, 2, SamplerSettings(), RNG, False).tokens == [5, 6]
    assert lookup.retest_tokens > 0 and not lookup.couples and not lookup.mixes
