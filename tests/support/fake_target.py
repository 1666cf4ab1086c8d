"""A tiny numpy stand-in for the ``Target`` protocol (app/engine/target.py): a deterministic "language" over
``V`` tokens where the most likely token after ``t`` is ``t + 1`` (mod V). It keeps a KV list like the
backend's, so the loop's rollback invariant can be read off it, and costs microseconds per pass."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from app.engine.llama.backend import ContextFullError


class FakeTarget:
    vocab = None  # no llama.cpp vocabulary: a grammar cannot compile for it

    def __init__(self, n_ctx: int = 64, vocab: int = 64, eog: int = -1, spread: float = 4.0):
        self.n_ctx, self.n_vocab, self.eog, self.spread = n_ctx, vocab, eog, spread
        self.path = Path("fake-target.gguf")
        self.recurrent = False
        self.rollback_limit: Optional[int] = None  # a KV cache: any suffix may be dropped
        self.cached: list[int] = []
        self.passes = 0
        self.tree: Optional[FakeTreePasses] = FakeTreePasses(self)  # tree drafts: rows by token, as ``decode``'s
        self.tree_refusal: Optional[str] = None

    def next_token(self, token: int) -> int:
        return (token + 1) % self.n_vocab

    def _row(self, token: int) -> np.ndarray:
        """Logits after ``token``: the next token clearly first, its neighbours behind (T > 0 can pick them)."""
        dist = np.abs(np.arange(self.n_vocab) - self.next_token(token))
        return (-self.spread * np.minimum(dist, self.n_vocab - dist)).astype(np.float32)

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        if len(self.cached) + len(tokens) > self.n_ctx:
            raise ContextFullError(f"{len(self.cached) + len(tokens)} tokens exceed the context of {self.n_ctx}")
        self.passes += 1
        self.cached.extend(tokens)
        rows = [i % len(tokens) for i in logits_for] if tokens else []
        return np.stack([self._row(tokens[i]) for i in rows]) if rows else np.empty((0, self.n_vocab), np.float32)

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"{len(tokens)} tokens do not fit in the context of {self.n_ctx}")
        keep = len(tokens) - self.missing(tokens)
        if need_logits and tokens:
            keep = min(keep, len(tokens) - 1)
        self.rollback(keep)
        rest = list(tokens[keep:])
        if not rest:
            return None
        rows = self.decode(rest, (-1,) if need_logits else ())
        return rows[0].copy() if need_logits else None

    def rollback(self, n_keep: int) -> None:
        del self.cached[n_keep:]

    def missing(self, tokens: Sequence[int]) -> int:
        keep = 0
        while keep < min(len(self.cached), len(tokens)) and self.cached[keep] == tokens[keep]:
            keep += 1
        return len(tokens) - keep

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def piece(self, token: int, special: bool = False) -> bytes:
        return f"<{token}>".encode()


class FakeTreePasses:
    """The fake's tree passes (``Target.tree``): a row depends on its token alone, so a tree's rows are its tokens'
    rows; the cache keeps the main chain (every node's first child) until ``keep`` keeps a path."""

    def __init__(self, target: FakeTarget):
        self.target = target
        self.base = 0
        self.trees = 0  # tree passes run

    def decode(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        t = self.target
        depth = [0] * len(tokens)
        for i in range(1, len(tokens)):
            depth[i] = depth[parents[i]] + 1
        if len(t.cached) + len(tokens) > t.n_ctx:  # every node takes a cell, as in a unified KV cache
            raise ContextFullError(f"a tree of {len(tokens)} tokens exceeds the context of {t.n_ctx}")
        self.base, self.trees = len(t.cached), self.trees + 1
        t.passes += 1
        chain, node = [0], 0
        while (kids := [i for i in range(1, len(tokens)) if parents[i] == node]):
            node = kids[0]
            chain.append(node)
        t.cached.extend(tokens[i] for i in chain)
        return np.stack([t._row(tok) for tok in tokens])

    def keep(self, tokens: Sequence[int], path: Sequence[int]) -> None:
        del self.target.cached[self.base:]
        self.target.cached.extend(tokens[v] for v in [0] + list(path))
