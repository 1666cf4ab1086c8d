"""The perfect drafter, a reference of the completion bench (``fimbench.py``), not a proposer the app offers: it
drafts the completion plain decoding wrote for the same prompt, so every draft token is right and drafting costs
nothing. Its request time is what verify passes alone take at its K: the fastest any drafter could make that
request on that machine with that ceiling. If even it cannot reach a speed target, no drafter can."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from app.engine.decoding.sampling import SamplerSettings
from app.engine.drafters.protocol import Draft, ProposerBase

PERFECT = "perfect"  # the bench's name for the reference (not a ProposerName: users cannot pick it in the app)


class ReplayProposer(ProposerBase):
    """Proposes the next ``k`` tokens of ``completion`` (plain decoding's output for this prompt) while the
    generation has followed it; nothing once it parts from it (then there is no plain continuation to replay).

    ``Draft.lookup`` stays 0: the tokens are not prompt lookup's, and counting them as lookup would make the
    bench's "lookup's share" claim a drafter that is not there. ``Draft.seconds`` is the real cost of slicing a
    list (microseconds), so the run's time is the target's verify passes and nothing else."""

    name = PERFECT

    def __init__(self, completion: Sequence[int]):
        self.completion = list(completion)
        self.start = 0  # where the completion begins in the history

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        self.start = len(prompt)

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool) -> Draft:
        t0 = time.perf_counter()
        done = len(history) - self.start
        follows = list(history[self.start:]) == self.completion[:done]
        tokens = self.completion[done:done + k] if follows else []
        return Draft(tokens=tokens, probs=[None] * len(tokens), seconds=time.perf_counter() - t0)

    def close(self) -> None:
        pass
