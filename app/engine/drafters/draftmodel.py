"""The draft model: a small GGUF with the target's vocabulary drafts autoregressively."""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import numpy as np

from app.engine.decoding.coupled import GumbelNoise, gumbel_max
from app.engine.decoding.sampling import SamplerSettings, distribution, greedy_token, recent_window
from app.engine.decoding.verify import sample_from
from app.engine.drafters.kvshare import KvShare, in_use
from app.engine.drafters.protocol import Draft, DraftSource, ProposerBase
from app.engine.drafters.readcost import ReadCosts
from app.engine.names import ProposerName


class DraftModelProposer(ProposerBase):
    """A small GGUF model with the target's vocabulary drafts autoregressively.

    Its KV cache holds a prefix of the history plus the tokens it drafted last time; on each call it keeps
    the part that still agrees with the history, rolls back the rest, and decodes what it has not seen.
    Drafting stops early when the draft's top probability falls below ``p_min`` (llama.cpp's rule).
    """

    name: str = ProposerName.DRAFT
    couples = True  # given the coupled rule's noise, it samples by Gumbel-max with it (coupled.py)
    # told of each drafted token (position, token, the draft's top probability, q where sampled else the logits,
    # the penalty's recent tokens) before the next is drafted: a tree drafter's siblings (tree.py)
    spare: Optional[Callable[[int, int, float, np.ndarray, Sequence[int]], None]] = None

    def __init__(self, model: DraftSource, p_min: float = 0.0, share: Optional[KvShare] = None,
                 costs: Optional[ReadCosts] = None):
        """``costs``: what this model was timed reading unseen history (the Pair keeps them per model:
        ``ReadCostBook``); fresh ones if None."""
        self.model = model
        self.p_min = p_min
        self.share = share  # the target's cache, copied where that saves reading (kvshare.py)
        self.costs = costs if costs is not None else ReadCosts(in_use(share))

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        if warm:
            t0, n = time.perf_counter(), self.model.missing(prompt[:-1])
            if self.share is not None:
                self.share.offer(prompt[:-1], need_logits=False)
            self.model.sync(prompt[:-1], need_logits=False)
            self.costs.timed(n, time.perf_counter() - t0)  # the prompt's reading prices later catch-ups

    def catch_up(self, history: Sequence[int], t_d: float) -> tuple[int, float]:
        """The history tokens it has not read and what reading them would cost it (``ReadCosts``)."""
        n = self.unread(history)
        return n, self.costs.seconds(n, t_d)

    def unread(self, history: Sequence[int]) -> int:
        """History tokens the draft's cache lacks (1 in steady state: the pending token)."""
        return self.model.missing(history)

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool, noise: Optional[GumbelNoise] = None,
                handoff: Optional[Callable[[Sequence[int]], Sequence[int]]] = None, reach: int = 0) -> Draft:
        """Up to ``k`` tokens drafted one by one, ending after an end-of-generation token. ``handoff``: asked
        after each drafted token (with those drafted so far) for tokens that should follow them instead of more
        drafting (prompt lookup taking over, duo.py), up to ``reach`` tokens in all; the first non-empty answer
        ends the draft with them. :attr:`spare`, where set, is told of each drafted token."""
        t0 = time.perf_counter()
        draft = Draft(q=[] if sample else None)
        room = self.model.n_ctx - len(history) - 1
        k, reach = min(k, room), min(max(reach, k), room)
        if k <= 0:
            return draft
        view = list(history)
        draft.synced = self.model.missing(view)
        logits = self._read(view)
        draft.t_sync = time.perf_counter() - t0 if draft.synced > 1 else 0.0
        self._learn_reading(draft.synced, draft.t_sync)
        recent = list(recent_window(history, sampler))  # grows with the draft; the sampler windows it
        for j in range(k):
            x, p_x, top, q = draw(logits, sampler, recent, rng, sample, noise, len(history) + j)
            if top < self.p_min:
                break
            draft.tokens.append(x)
            draft.probs.append(p_x)
            if q is not None:
                draft.q.append(q)
            if self.spare is not None:
                self.spare(j, x, top, q if q is not None else logits, recent)
            if recent:
                recent.append(x)
            if self.model.is_eog(x):  # (None from an MTP head, which has no vocabulary: the loop cuts there)
                break  # the reply ends here if the target keeps it: nothing after it can be emitted
            if handoff is not None and j + 1 < reach:
                more = list(handoff(draft.tokens))[:reach - j - 1]
                if more:  # x stays unread: the next catch-up reads it with what the target kept
                    draft.tokens += more
                    draft.probs += [None] * len(more)
                    if sample:
                        draft.q += [None] * len(more)
                    draft.tail = len(more)
                    break
            if j + 1 < k:
                logits = self.model.decode([x])[0]
        draft.seconds = time.perf_counter() - t0
        return draft

    def _learn_reading(self, synced: int, t_sync: float) -> None:
        """A timed catch-up prices the next ones (``ReadCosts.timed``)."""
        self.costs.timed(synced, t_sync)

    def _read(self, view: list[int]):
        """Sync the draft's cache to ``view`` (taking the target's first where that saves reading); the last
        token's logits."""
        if self.share is None:
            return self.model.sync(view)
        self.share.offer(view)
        n, t0 = max(self.model.missing(view), 1), time.perf_counter()
        logits = self.model.sync(view)
        self.share.timed_read(n, time.perf_counter() - t0)
        return logits

    def time_tokens(self, history: Sequence[int], k: int) -> float:
        """Seconds for ``k`` draft decodes past what the draft's cache holds, then rolled back: the draft's
        cost re-measured while it sleeps, with no catch-up on the history (the cache is left as it was)."""
        m = self.model
        keep = m.n_past
        k = min(k, m.n_ctx - keep)
        t0 = time.perf_counter()
        for _ in range(k):
            m.decode([history[-1]])
        seconds = time.perf_counter() - t0
        m.rollback(keep)
        return seconds

    def close(self) -> None:
        """Nothing to free: the draft model belongs to whoever loaded it (the Pair closes it)."""


def draw(logits: np.ndarray, sampler: SamplerSettings, recent: Sequence[int], rng: np.random.Generator,
         sample: bool, noise: Optional[GumbelNoise], at: int) -> tuple[int, float, float, Optional[np.ndarray]]:
    """A drafted token after ``logits`` at absolute position ``at``, drawn as the verification rule needs it (the
    argmax after the penalty over ``recent``; a draw from ``q`` at T > 0; with ``noise``, the Gumbel-max of ``q``
    with that position's noise): (token, its probability, the top probability, ``q`` where sampled)."""
    if sample:
        q = distribution(logits, sampler, recent)
        x = sample_from(q, rng) if noise is None else gumbel_max(q, noise.at(at, len(q)))
        return x, float(q[x]), float(q.max()), q
    x = greedy_token(logits, sampler, recent)
    p_x = softmax_at(logits, x)
    return x, p_x, p_x, None


def softmax_at(logits: np.ndarray, x: int) -> float:
    """The softmax of ``logits`` at ``x``, without forming the whole distribution."""
    m = float(logits[x])
    return float(1.0 / np.exp(logits - m, dtype=np.float32).sum())
