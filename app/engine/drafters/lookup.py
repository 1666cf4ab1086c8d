"""Prompt lookup: the history's own earlier text proposes what follows."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from app.engine.decoding.sampling import SamplerSettings
from app.engine.drafters.protocol import Draft, ProposerBase
from app.engine.names import ProposerName


class PromptLookupProposer(ProposerBase):
    """Prompt lookup decoding (Saxena 2023): find the most recent earlier occurrence of the history's last
    n-gram (longest n first) and propose the tokens that followed it. No extra model, no cost to speak of.
    An index from n-gram to its last position is updated incrementally as the history grows. Single-token
    matches are too unreliable to pay for their verification on a CPU, so the shortest match is a bigram."""

    name: str = ProposerName.LOOKUP
    # A pause on its acceptance is re-tested at each generation's start (loop.py) until this many of its tokens
    # were judged: acceptance belongs to the text (an edit request copies, a question does not), and a probe
    # costs nothing to propose, only its verify slots (the reply's first proposal often follows a code fence and
    # fails, so a single probe would misjudge a reply that copies).
    retest_tokens = 8

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.index: dict[tuple, int] = {}  # n-gram -> position just after its latest occurrence
        self.seen = 0  # n-grams ending at positions <= seen are indexed

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        self.index.clear()
        self.seen = 0

    def _index_until(self, history: Sequence[int], end: int) -> None:
        """Index every n-gram that ends at a position <= ``end`` (exclusive end index)."""
        for stop in range(self.seen + 1, end + 1):
            for n in range(self.min_ngram, min(self.max_ngram, stop) + 1):
                self.index[tuple(history[stop - n:stop])] = stop
        self.seen = max(self.seen, end)

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool) -> Draft:
        t0 = time.perf_counter()
        draft = Draft()
        self._index_until(history, len(history) - 1)  # n-grams that already have a continuation
        for n in range(min(self.max_ngram, len(history) - 1), self.min_ngram - 1, -1):
            start = self.index.get(tuple(history[len(history) - n:]))
            if start is not None:
                draft.tokens = list(history[start:start + k])
                break
        self._index_until(history, len(history))
        draft.probs = [None] * len(draft.tokens)
        draft.lookup = len(draft.tokens)
        draft.seconds = time.perf_counter() - t0
        return draft

    def close(self) -> None:
        pass
