"""A hindsight bound for choosing a drafter per step (T = 0): how fast a chooser that *knew* what each drafter
would get accepted at every position could have been, under the costs measured in the same sitting.

At T = 0 the output ``y`` is fixed (plain decoding's), so what any proposal would have kept at position i is
its common prefix with ``y[i:]``:

- lookup's proposal there (the suffix index over the prompt and ``y[:i]``, up to ``k_max`` tokens) keeps
  ``L_i`` tokens;
- the draft model's greedy proposal keeps ``D_i``: the run of positions j >= i where its argmax given
  ``prompt + y[:j]`` is ``y[j]`` (one batched pass over ``prompt + y`` gives every such argmax: a proposal
  that matched so far was conditioned on exactly ``y``'s prefix), capped at ``k_max``.

A step at i then emits (kept + 1) tokens: plain (cost t_v(1)), lookup proposing exactly its L_i kept tokens
(t_v(L_i + 1)), or the draft model drafting exactly D_i (D_i t_d + t_v(D_i + 1)); the least total time is a
shortest path over positions (dynamic programming, ``best_time``). Proposing exactly what will be kept and
reading history for free (no catch-up) make it a bound no real chooser reaches; it is an estimate built on
the measured costs (``t_v(n) = a + b n`` and ``t_d`` from auto K's controller), not a timed run.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192) for the step costs; Bellman 1957 for the
shortest path.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from app.engine.pair import Pair
from app.engine.suffix import SuffixIndex


def best_time(lookup_kept: Sequence[int], draft_kept: Sequence[int], a: float, b: float, t_d: float) -> float:
    """The least seconds to emit ``len(lookup_kept)`` tokens choosing, per step, plain, lookup or the draft
    model (see the module docstring); ``lookup_kept[i]``, ``draft_kept[i]``: what each keeps at position i."""
    n = len(lookup_kept)
    best = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        t = a + b + best[i + 1]
        if lookup_kept[i]:
            t = min(t, a + b * (lookup_kept[i] + 1) + best[min(n, i + lookup_kept[i] + 1)])
        if draft_kept[i]:
            d = draft_kept[i]
            t = min(t, d * t_d + a + b * (d + 1) + best[min(n, i + d + 1)])
        best[i] = t
    return best[0]


def lookup_kept(prompt: Sequence[int], output: Sequence[int], k_max: int) -> list[int]:
    """L_i for every output position: what lookup's proposal there keeps of the output."""
    index = SuffixIndex()
    index.start(prompt)
    kept = []
    for i in range(len(output)):
        match = index.longest(k_max)
        k = 0
        if match is not None:
            for tok, want in zip(match.tokens, output[i:]):
                if tok != want:
                    break
                k += 1
        kept.append(k)
        index.extend([output[i]])
    return kept


def draft_kept(pair: Pair, prompt: Sequence[int], output: Sequence[int], k_max: int) -> list[int]:
    """D_i for every output position: the run of the draft model's greedy agreement with the output from i."""
    model = pair.draft
    if model is None:
        raise ValueError("the hindsight bound needs the pair's draft model")
    model.reset()
    model.sync(list(prompt[:-1]), need_logits=False)
    feed = [prompt[-1]] + list(output[:-1])  # row j predicts output[j]
    agree = []
    for start in range(0, len(feed), model.n_batch):
        chunk = feed[start:start + model.n_batch]
        rows = model.decode(chunk, range(len(chunk)))
        agree.extend((np.argmax(rows, axis=1) == np.asarray(output[start:start + len(chunk)])).tolist())
    model.reset()
    kept, run = [0] * len(output), 0
    for i in range(len(output) - 1, -1, -1):
        run = run + 1 if agree[i] else 0
        kept[i] = min(run, k_max)
    return kept
