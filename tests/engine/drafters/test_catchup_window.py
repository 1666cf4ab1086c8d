"""The draft model's catch-up window (proposer "auto"): after a stretch of another drafter's tokens it reads
only the last ``window`` of them; its cache is the history with holes, kept consistent from step to step, and
the greedy output still equals plain decoding (the target verifies every token)."""

from __future__ import annotations

import numpy as np

from app.engine.drafters.duo import CATCH_WINDOW
from app.engine.loop import GenConfig, run
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.decoding.sampling import SamplerSettings
from app.lab.prompts import builtin_suite

from support.greedy import assert_same_greedy

GREEDY = SamplerSettings()


def test_a_long_stretch_is_read_through_a_window_and_the_cache_stays_consistent(smol_pair):
    smol_pair.reset()
    model = smol_pair.draft
    prompt = smol_pair.target.tokenize("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    stretch = smol_pair.target.tokenize("    return a - b\n\ndef mul(a, b):\n    return a * b\n", add_special=False)
    assert len(stretch) > 12
    proposer = DraftModelProposer(model, window=4)
    proposer.begin(prompt)
    rng = np.random.default_rng(0)
    history = list(prompt)
    proposer.propose(history, 2, GREEDY, rng, False)  # steady state: nothing skipped
    assert proposer.skips == []
    history += stretch  # another drafter's tokens, accepted
    draft = proposer.propose(history, 3, GREEDY, rng, False)
    assert draft.synced == len(stretch)  # every new history token counts, read or skipped …
    assert proposer.skips == [(len(prompt), len(history) - 5)]  # … but only the last 4 and the pending one are read
    view = proposer.view(history)
    assert len(view) == len(prompt) + 5 and view[-5:] == history[-5:]
    assert model.cached[:len(view)] == view  # positions consecutive: the cache holds the view, then the draft
    history += draft.tokens[:2]  # two of its tokens accepted: an ordinary step, no new hole
    again = proposer.propose(history, 3, GREEDY, rng, False)
    assert again.synced <= 2 and len(proposer.skips) == 1
    assert model.cached[:len(proposer.view(history))] == proposer.view(history)
    history += stretch  # a second stretch: a second hole, after the first
    proposer.propose(history, 2, GREEDY, rng, False)
    assert len(proposer.skips) == 2 and proposer.skips[1][0] > proposer.skips[0][1]
    assert model.cached[:len(proposer.view(history))] == proposer.view(history)
    proposer.begin(prompt)  # a new generation reads everything again
    assert proposer.skips == []


def test_a_short_stretch_is_read_whole(smol_pair):
    smol_pair.reset()
    prompt = smol_pair.target.tokenize("The capital of France is")
    proposer = DraftModelProposer(smol_pair.draft, window=8)
    proposer.begin(prompt)
    history = list(prompt) + smol_pair.target.tokenize(" Paris, and", add_special=False)
    proposer.propose(history, 2, GREEDY, np.random.default_rng(0), False)
    assert proposer.skips == [] and smol_pair.draft.cached[:len(history)] == history


def test_auto_reads_all_that_its_draft_model_has_not_seen(smol_pair):
    """A hole in the draft model's context makes it guess far worse (scripts/draft_context.py): auto's draft
    model reads what lookup emitted instead of skipping it."""
    assert CATCH_WINDOW is None
    assert smol_pair.proposer(GenConfig(max_tokens=8, proposer="auto")).draft.window is None


def test_greedy_auto_with_the_window_equals_plain(smol_pair):
    for prompt in [p for p in builtin_suite("edit") if p.id in ("edit-hints", "edit-class")]:
        tokens = prompt.tokens(smol_pair)
        smol_pair.reset()
        plain, _ = run(smol_pair.target, tokens, GenConfig(max_tokens=128, speculative=False))
        smol_pair.reset()
        cfg = GenConfig(max_tokens=128, proposer="auto", k=16)  # fixed K: long matches are taken whole
        proposer = smol_pair.proposer(cfg)
        proposer.draft.use_window(8)  # the option auto does not take: skip all but the last 8
        spec, stats = run(smol_pair.target, tokens, cfg, proposer)
        assert_same_greedy(smol_pair, tokens, plain, spec, prompt.id)
        assert proposer.draft.window == 8
        assert stats.lookup_drafted > 0


def test_an_emptied_draft_cache_is_read_whole_not_skipped(smol_pair):
    """The draft model's cache emptied between two steps (the hindsight bound resets it between replies, and a
    reply may start without a warm-up): nothing is read, so nothing can be skipped; the draft reads it all.
    (It raised IndexError: a hole was extended where there was none.)"""
    smol_pair.reset()
    model = smol_pair.draft
    prompt = smol_pair.target.tokenize("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    proposer = DraftModelProposer(model, window=4)
    proposer.begin(prompt, warm=False)
    model.reset()
    history = list(prompt) + smol_pair.target.tokenize("    return a - b\n", add_special=False)
    draft = proposer.propose(history, 2, GREEDY, np.random.default_rng(0), False)
    assert proposer.skips == [] and draft.synced == len(history)
    assert model.cached[:len(history)] == history
