"""Proposers: whatever suggests the next tokens for the target to verify, behind one small protocol.

A proposer sees the whole token history (prompt + accepted output) and returns up to ``k`` draft tokens with,
when it has them, the distributions ``q`` they were drawn from (needed by exact rejection sampling; ``None``
means a deterministic proposal, ``q = onehot``). It keeps whatever cache it has in sync with the history by
itself, so the decode loop never has to know what kind of proposer it drives. New kinds (cross-tokenizer,
tree) implement the same three methods. A proposer that sets ``couples = True`` also takes ``noise`` (the
coupled rule's Gumbel noise, coupled.py) and samples with it; the others' proposals count as deterministic. One
with ``retest_tokens`` has a pause on its acceptance re-tested at the start of every generation, until that many
of its tokens were judged (``DraftLength.retest``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from app.engine.backend import Model
from app.engine.coupled import GumbelNoise, gumbel_max
from app.engine.kvshare import KvShare
from app.engine.sampling import SamplerSettings, distribution, greedy_token, recent_window
from app.engine.verify import sample_from


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: Optional[list[np.ndarray]] = None  # one distribution per token, or None (deterministic)
    probs: list[Optional[float]] = field(default_factory=list)  # proposer's confidence per token, for display
    seconds: float = 0.0
    synced: int = 0  # history tokens the proposer had to catch up on before drafting (1 in steady state)
    t_sync: float = 0.0  # of ``seconds``: the catch-up on those tokens (a one-off, not a per-token cost)
    lookup: int = 0  # the first ``lookup`` tokens came from prompt lookup (provenance), the rest from a model …
    tail: int = 0  # … but the last ``tail``: prompt lookup took over from the model (a handoff, duo.py)

    def from_lookup(self, i: int) -> bool:
        """Whether token ``i`` came from prompt lookup."""
        return i < self.lookup or i >= len(self.tokens) - self.tail

    def lookup_kept(self, n: int) -> int:
        """Of the first ``n`` tokens (those the target kept), how many came from prompt lookup."""
        return min(n, self.lookup) + max(0, n - (len(self.tokens) - self.tail))


def end_of_reply(tokens: Sequence[int], is_eog: Callable[[int], bool]) -> Optional[int]:
    """How many of ``tokens`` run through the first end-of-generation token (the reply ends there if the target
    keeps it: nothing after it can be emitted); None without one."""
    return next((i + 1 for i, tok in enumerate(tokens) if is_eog(tok)), None)


class Proposer(Protocol):
    name: str

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        """A new generation starts from ``prompt``. ``warm``: prefill caches now (False while speculation is
        paused; ``propose`` must then catch up by itself)."""

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings,
                rng: np.random.Generator, sample: bool) -> Draft:
        """Up to ``k`` tokens to follow ``history``. ``sample``: draw from q (rejection sampling) rather
        than take the most likely token."""

    def close(self) -> None:
        """Free what the proposer holds."""


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


class PromptLookupProposer:
    """Prompt lookup decoding (Saxena 2023): find the most recent earlier occurrence of the history's last
    n-gram (longest n first) and propose the tokens that followed it. No extra model, no cost to speak of.
    An index from n-gram to its last position is updated incrementally as the history grows. Single-token
    matches are too unreliable to pay for their verification on a CPU (measured on the built-in suite:
    median 1.13x with n = 1..3 against 1.18x with n = 2..3), so the shortest match is a bigram."""

    name = "lookup"
    # A pause on its acceptance is re-tested at each generation's start (loop.py) until this many of its tokens
    # were judged: acceptance belongs to the text (an edit request copies, a question does not), and a probe
    # costs nothing to propose, only its verify slots (the reply's first proposal is often one token after a
    # code fence, which fails: one probe alone left lookup paused on a reply that copies).
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


def _softmax_at(logits: np.ndarray, x: int) -> float:
    m = float(logits[x])
    return float(1.0 / np.exp(logits - m, dtype=np.float32).sum())
