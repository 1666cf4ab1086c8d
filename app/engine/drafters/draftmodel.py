"""The draft model: a small GGUF with the target's vocabulary drafts autoregressively."""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import numpy as np

from app.engine.decoding.coupled import GumbelNoise, gumbel_max
from app.engine.decoding.sampling import SamplerSettings, distribution, greedy_token, recent_window
from app.engine.decoding.verify import sample_from
from app.engine.drafters.kvshare import KvShare
from app.engine.drafters.protocol import Draft
from app.engine.llama.backend import Model


class DraftModelProposer:
    """A small GGUF model with the target's vocabulary drafts autoregressively.

    Its KV cache holds a prefix of the history plus the tokens it drafted last time; on each call it keeps
    the part that still agrees with the history, rolls back the rest, and decodes what it has not seen.
    Drafting stops early when the draft's top probability falls below ``p_min`` (llama.cpp's rule).

    ``window``: when more than this many history tokens are new to the draft (another drafter's accepted
    tokens, duo.py), it reads only the last ``window`` of them and *skips* the rest: its cache then holds the
    history with holes (``skips``, history ranges never read), at consecutive positions. Its proposals are
    conditioned on less, which only changes how good they are: the target verifies every token, and ``q`` is
    still the distribution each token was drawn from. ``synced`` counts the skipped tokens too, so the catch-up
    time per token is what a long stretch of other tokens really costs.
    """

    name = "draft"
    couples = True  # given the coupled rule's noise, it samples by Gumbel-max with it (coupled.py)

    def __init__(self, model: Model, p_min: float = 0.0, window: Optional[int] = None,
                 share: Optional[KvShare] = None):
        self.model = model
        self.p_min = p_min
        self.share = share  # the target's cache, copied where that saves reading (kvshare.py)
        self.window: Optional[int] = None
        self.skips: list[tuple[int, int]] = []  # history ranges [a, b) the draft's cache does not hold
        self.use_window(window)

    def use_window(self, window: Optional[int]) -> None:
        """Skip all but the last ``window`` of a long run of unseen tokens (None: read them all; recurrent
        memory always reads them all)."""
        self.window = window if window and not self.model.recurrent else None

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        self.skips = []
        if warm:
            if self.share is not None:
                self.share.offer(prompt[:-1], need_logits=False)
            self.model.sync(prompt[:-1], need_logits=False)

    def view(self, history: Sequence[int]) -> list[int]:
        """``history`` as the draft's cache holds it: without the skipped ranges."""
        if self.skips and self.skips[-1][1] > len(history):
            self.skips = []  # a shorter history without begin(): a new one
        out: list[int] = []
        at = 0
        for a, b in self.skips:
            out.extend(history[at:a])
            at = b
        out.extend(history[at:])
        return out

    def _skip(self, history: Sequence[int]) -> tuple[list[int], int]:
        """(the view to sync, history tokens new to the draft), skipping all but the last ``window`` of those
        when there are more."""
        view = self.view(history)
        missing = self.model.missing(view)
        if self.window is None or missing <= self.window + 1:
            return view, missing
        start = len(view) - missing  # view index of the first token the draft lacks, then its history index
        for a, b in self.skips:
            if a > start:
                break
            start += b - a
        stop = len(history) - self.window - 1  # the last window tokens and the pending one are read
        end = self.skips[-1][1] if self.skips else 0
        # the draft lacks tokens before a hole (rolled back), or lacks everything (its cache was emptied, e.g.
        # by a measurement between two replies): read them all
        if start < end or stop <= start or start == 0:
            return view, missing
        if start == end:
            self.skips[-1] = (self.skips[-1][0], stop)
        else:
            self.skips.append((start, stop))
        return self.view(history), missing

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool, noise: Optional[GumbelNoise] = None,
                handoff: Optional[Callable[[Sequence[int]], Sequence[int]]] = None, reach: int = 0) -> Draft:
        """Up to ``k`` tokens drafted one by one, ending after an end-of-generation token. ``handoff``: asked
        after each drafted token (with those drafted so far) for tokens that should follow them instead of more
        drafting (prompt lookup taking over, duo.py), up to ``reach`` tokens in all; the first non-empty answer
        ends the draft with them."""
        t0 = time.perf_counter()
        draft = Draft(q=[] if sample else None)
        room = self.model.n_ctx - len(history) - 1
        k, reach = min(k, room), min(max(reach, k), room)
        if k <= 0:
            return draft
        ended = getattr(self.model, "is_eog", None)  # (an MTP head has no vocabulary: the loop cuts there)
        view, draft.synced = self._skip(history)
        logits = self._read(view)
        draft.t_sync = time.perf_counter() - t0 if draft.synced > 1 else 0.0
        recent = list(recent_window(history, sampler))  # grows with the draft; the sampler windows it
        for j in range(k):
            if sample:
                q = distribution(logits, sampler, recent)
                x = sample_from(q, rng) if noise is None else gumbel_max(q, noise.at(len(history) + j, len(q)))
                p_x, top = float(q[x]), float(q.max())
            else:
                x = greedy_token(logits, sampler, recent)
                p_x = top = _softmax_at(logits, x)
            if top < self.p_min:
                break
            draft.tokens.append(x)
            draft.probs.append(p_x)
            if sample:
                draft.q.append(q)
            if recent:
                recent.append(x)
            if ended is not None and ended(x):
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

    def _read(self, view: list[int]):
        """Sync the draft's cache to ``view`` (taking the target's first where that saves reading); the last
        token's logits."""
        share = self.share if not self.skips else None
        if share is None:
            return self.model.sync(view)
        share.offer(view)
        n, t0 = max(self.model.missing(view), 1), time.perf_counter()
        logits = self.model.sync(view)
        share.timed_read(n, time.perf_counter() - t0)
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


def _softmax_at(logits: np.ndarray, x: int) -> float:
    m = float(logits[x])
    return float(1.0 / np.exp(logits - m, dtype=np.float32).sum())
