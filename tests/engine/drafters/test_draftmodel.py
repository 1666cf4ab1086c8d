"""The draft model as a proposer (``draftmodel.py``): it stops after an end of generation, keeps its cache in sync
with the history, hands over to prompt lookup leaving its last token unread, and leaves the pair's model open.
The first and last on the numpy fake (tests/support/fake_target.py), the others on the demo pair."""

from __future__ import annotations

import numpy as np

from app.engine.decoding.sampling import SamplerSettings
from app.engine.drafters.draftmodel import DraftModelProposer
from app.lab.prompts import builtin_suite

from support.fake_target import FakeTarget

GREEDY = SamplerSettings(temperature=0.0)
PROMPT = [1, 2, 3]


def test_a_draft_model_stops_drafting_after_an_end_of_generation_token():
    model = FakeTarget(eog=10)  # as a draft model: it drafts 4, 5, … and 10 ends a reply
    draft = DraftModelProposer(model).propose(PROMPT, 12, GREEDY, np.random.default_rng(0), False)
    assert draft.tokens == list(range(4, 11))


def test_draft_proposer_keeps_its_cache_in_sync(smol_pair):
    proposer = DraftModelProposer(smol_pair.draft)
    history = smol_pair.completion_prompt("def add(a, b):")
    proposer.begin(history)
    sampler = SamplerSettings()
    rng = np.random.default_rng(0)
    d1 = proposer.propose(history, 4, sampler, rng, sample=False)
    assert len(d1.tokens) == 4 and smol_pair.draft.cached == history + d1.tokens[:3]
    # the target accepted two tokens and corrected the third
    history2 = history + d1.tokens[:2] + [13]
    d2 = proposer.propose(history2, 3, sampler, rng, sample=False)  # (it may stop early, after an end of turn)
    assert d2.tokens and smol_pair.draft.cached == history2 + d2.tokens[:-1]  # the last drafted token is not read


def test_the_draft_model_hands_over_and_leaves_its_last_token_unread(smol_pair):
    """A handoff ends the draft with lookup's tokens (no q, no probability: deterministic); the draft model's
    cache stops before its last drafted token, which the next catch-up reads with what the target kept."""
    smol_pair.reset()
    prompt = builtin_suite("edit")[0].tokens(smol_pair)
    proposer = DraftModelProposer(smol_pair.draft)
    proposer.begin(prompt)
    asked: list[int] = []

    def handoff(drafted):
        asked.append(len(drafted))
        return [11, 12, 13, 14] if len(drafted) == 2 else []

    draft = proposer.propose(prompt, 4, SamplerSettings(temperature=0.7), np.random.default_rng(1), True,
                             handoff=handoff, reach=5)
    assert asked == [1, 2] and draft.tokens[2:] == [11, 12, 13] and draft.tail == 3  # past K = 4, up to reach
    assert draft.probs[2:] == [None] * 3 and draft.q[2:] == [None] * 3 and draft.q[0] is not None
    assert [draft.from_lookup(i) for i in range(5)] == [False, False, True, True, True]
    assert draft.lookup_kept(4) == 2 and draft.lookup_kept(1) == 0
    assert smol_pair.draft.cached == list(prompt) + draft.tokens[:1]  # the 2nd drafted token was not decoded
    again = proposer.propose(prompt + draft.tokens[:3], 2, SamplerSettings(), np.random.default_rng(1), False)
    assert again.synced == 2  # its 2nd token and lookup's first, kept by the target
    assert smol_pair.draft.cached[:len(prompt) + 3] == list(prompt) + draft.tokens[:3]


def test_the_draft_proposer_leaves_the_pairs_model_open():
    class Owned(FakeTarget):
        closed = False

        def close(self):
            self.closed = True

    model = Owned()
    DraftModelProposer(model).close()
    assert not model.closed
