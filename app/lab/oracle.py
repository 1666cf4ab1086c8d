"""A hindsight bound for choosing a drafter per step (T = 0): how fast a chooser that *knew* what each drafter
would get accepted at every position could have been, under the costs measured in the same sitting.

At T = 0 the output ``y`` is fixed (plain decoding's), so what any proposal would have kept at position i is
its common prefix with ``y[i:]``:

- lookup's proposal there (the suffix index over the prompt and ``y[:i]``, up to ``k_max`` tokens) keeps
  ``L_i`` tokens;
- the draft model's greedy proposal keeps ``D_i``: the run of positions j >= i where its argmax given
  ``prompt + y[:j]`` is ``y[j]`` (one batched pass over ``prompt + y`` gives every such argmax: a proposal
  that matched so far was conditioned on exactly ``y``'s prefix), capped at ``k_max``.

A step at i emits what it keeps + 1 tokens: plain (cost t_v(1)); lookup proposing l <= L_i tokens
(t_v(l + 1)); the draft model drafting d <= D_i tokens (R(p) + d t_d + t_v(d + 1)), or D_i + 1 with the last
one corrected by the target; or lookup's L_i then d <= D_{i+L_i} draft tokens past them (R(p + L_i) + d t_d
+ t_v(L_i + d + 1)); or d <= D_i draft tokens then l <= L_{i+d} of lookup's past them, the handoff
(R(p) + d t_d + t_v(d + l + 1)), which leaves the draft model l + 2 tokens to read. ``p`` is how many emitted
tokens the draft model has not read, and R(p) what reading them costs it (``mix.reading``: nothing for 1,
``t_s`` for 2, ``t_c`` for each further one): 2 after a fully kept draft, 1
after a corrected one, one more for every token a plain or lookup step emits. The least total time is a
shortest path over (position, p) (dynamic programming, ``best_time``). With ``t_s = t_c = 0`` the reading is
free: the looser bound of reading the future *and* paying no catch-up.
Proposing exactly what will be kept makes it a bound no real chooser reaches; it is an estimate built on the
measured costs (``t_v(n)``, ``t_d`` from auto K's controller, ``t_s`` and ``t_c`` timed by auto's
catch-ups), not a timed run.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192) for the step costs; Bellman 1957 for the
shortest path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from app.engine.control.mix import reading
from app.engine.pair import Pair
from app.engine.drafters.suffix import SuffixIndex


@dataclass(frozen=True)
class StepCosts:
    """Seconds: a target pass over ``n`` tokens ``tv(n)`` (auto K's, ``verifycost.py``), a draft token ``t_d``,
    and the draft model's reading (``t_s`` for 2 unseen tokens, ``t_c`` for each further one)."""

    tv: Callable[[int], float]
    t_d: float
    t_s: float = 0.0
    t_c: float = 0.0

    def verify(self, n: int) -> float:
        return self.tv(n)

    def read(self, n: int) -> float:
        return reading(n, self.t_s, self.t_c)


def best_time(lookup_kept: Sequence[int], draft_kept: Sequence[int], costs: StepCosts, k_max: int = 16) -> float:
    """The least seconds to emit ``len(lookup_kept)`` tokens choosing, per step, plain, lookup, the draft model,
    lookup extended by it or it handing off to lookup (see the module docstring); ``lookup_kept[i]``,
    ``draft_kept[i]``: what each keeps at position i (all 0: that drafter is not used)."""
    n = len(lookup_kept)
    drafts = any(draft_kept)  # the draft model is used: draft, draft to a correction, extend lookup
    reach: list[dict] = [{} for _ in range(n + 1)]  # position -> {unread tokens p: least seconds}
    reach[0][1] = 0.0

    def relax(j: int, q: int, t: float) -> None:  # reach position j (the end at most) with q unread in t
        j = min(n, j)
        if t < reach[j].get(q, math.inf):
            reach[j][q] = t

    for i in range(n):
        kept_l, kept_d = lookup_kept[i], draft_kept[i]
        for p, t in reach[i].items():
            relax(i + 1, p + 1, t + costs.verify(1))
            for l in range(1, kept_l + 1):
                relax(i + l + 1, p + l + 1, t + costs.verify(l + 1))
            if not drafts:
                continue
            r = t + costs.read(p)
            for d in range(1, kept_d + 1):
                relax(i + d + 1, 2, r + d * costs.t_d + costs.verify(d + 1))
                for l in range(1, min(lookup_kept[i + d] if i + d < n else 0, k_max - d) + 1):  # the handoff
                    relax(i + d + l + 1, l + 2, r + d * costs.t_d + costs.verify(d + l + 1))
            if kept_d < k_max:
                relax(i + kept_d + 1, 1, r + (kept_d + 1) * costs.t_d + costs.verify(kept_d + 2))
            if kept_l and i + kept_l < n:
                r = t + costs.read(p + kept_l)
                for d in range(1, min(draft_kept[i + kept_l], k_max - kept_l) + 1):
                    relax(i + kept_l + d + 1, 2, r + d * costs.t_d + costs.verify(kept_l + d + 1))
    return min(reach[n].values())


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
