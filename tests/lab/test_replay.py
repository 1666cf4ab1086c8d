"""The perfect drafter: it drafts plain decoding's own completion while the generation follows it, nothing once
they part, and claims neither prompt lookup's tokens nor a model's cost."""

from __future__ import annotations

import numpy as np

from app.engine.decoding.sampling import SamplerSettings
from app.lab.replay import PERFECT, ReplayProposer


def test_it_drafts_the_next_k_tokens_of_the_completion():
    p = ReplayProposer([10, 11, 12, 13, 14])
    p.begin([1, 2, 3])
    rng, s = np.random.default_rng(0), SamplerSettings(temperature=0.0)
    d = p.propose([1, 2, 3], 3, s, rng, False)
    assert d.tokens == [10, 11, 12] and d.q is None and d.lookup == 0 and d.probs == [None] * 3
    assert p.propose([1, 2, 3, 10, 11, 12, 13], 16, s, rng, False).tokens == [14]
    assert p.propose([1, 2, 3, 10, 11, 12, 13, 14], 16, s, rng, False).tokens == []  # the completion is over
    assert p.propose([1, 2, 3, 10, 99], 4, s, rng, False).tokens == []  # parted from it: nothing to replay
    assert p.name == PERFECT and not p.mixes and p.retest_tokens == 0
