"""χ² through the real loop: the exact joint law of a reply's first two tokens, computed from a fresh copy of the
target, against the counts of many seeded speculative runs (each drafter's test supplies the runs)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from app.engine.events import DoneEvent, StepEvent
from app.engine.loop import GenConfig, generate
from app.engine.decoding.sampling import SamplerSettings, distribution

# χ² critical values at significance 0.001 by degrees of freedom (30.0 beyond the table).
CRITICAL = {8: 26.124, 7: 24.322, 5: 20.515, 3: 16.266}


def two_token_law(fresh, prompt: Sequence[int], sampler: SamplerSettings) -> dict[tuple[int, int], float]:
    """P(first two tokens) under ``sampler``, from ``fresh`` (a model that ``sync``s a prompt to its logits)."""
    prompt = list(prompt)
    p1 = distribution(fresh.sync(prompt), sampler, prompt)
    joint = {}
    for a in np.flatnonzero(p1):
        p2 = distribution(fresh.sync(prompt + [int(a)]), sampler, prompt + [int(a)])
        for b in np.flatnonzero(p2):
            joint[(int(a), int(b))] = p1[a] * p2[b]
    return joint


def assert_keeps_law(law: dict[tuple[int, int], float], first_two: Callable[[int], Sequence[int]],
                     draws: int = 1500) -> None:
    """Run ``first_two(seed)`` for ``draws`` seeds and assert the counts fit ``law`` (χ², significance 0.001)."""
    keys = sorted(law)
    counts = np.zeros(len(keys))
    for seed in range(draws):
        counts[keys.index(tuple(first_two(seed)[:2]))] += 1
    expected = np.array([law[k] for k in keys]) * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < CRITICAL.get(len(keys) - 1, 30.0), (chi2, counts, expected)


def assert_pair_keeps_law(pair, fresh, prompt: Sequence[int], proposer: str, draws: int = 1500) -> None:
    """χ² of the first two tokens at T = 1, top-k 3, K 2 through ``pair``'s loop with ``proposer`` against the
    law computed from ``fresh``, every run drafting (rejected tokens are rolled back in between)."""
    fresh.reset()
    law = two_token_law(fresh, prompt, SamplerSettings(temperature=1.0, top_k=3))
    pair.reset()
    drafted = 0

    def first_two(seed: int) -> Sequence[int]:
        nonlocal drafted
        cfg = GenConfig(max_tokens=2, k=2, proposer=proposer,
                        sampler=SamplerSettings(temperature=1.0, top_k=3, seed=seed))
        events = list(generate(pair.target, prompt, cfg, pair.proposer(cfg)))
        drafted += sum(e.drafted for e in events if isinstance(e, StepEvent))
        assert isinstance(events[-1], DoneEvent)
        return events[-1].tokens

    assert_keeps_law(law, first_two, draws=draws)
    assert drafted >= draws
