"""What the decode loop needs from the model it verifies with: the ``Target`` protocol.

``backend.Model`` satisfies it; so does any object with these members (tests/fake_target.py is a numpy one
that runs the loop's invariants in milliseconds). The KV cache semantics are the backend's: ``decode``
appends at the end of what is cached, ``rollback(n)`` keeps the first ``n`` cached tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

import numpy as np


class TreePasses(Protocol):
    """A target's tree passes (``llama/treekv.py``)."""

    def decode(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Append the tree ``tokens`` (index 0: the pending token; ``parents`` by index) in one pass; every row."""

    def keep(self, tokens: Sequence[int], path: Sequence[int]) -> None:
        """Keep the root and the nodes ``path`` (indices, the root's child first) of the last tree pass."""


class Target(Protocol):
    n_ctx: int  # tokens the context (KV cache) holds
    path: Path  # the model file (its name appears in errors)
    recurrent: bool  # recurrent/hybrid memory: speculation only where ``rollback_limit`` is > 0
    # the longest suffix a verification pass may drop: None for a KV cache (any), 0 for recurrent memory without
    # snapshots (none)
    rollback_limit: Optional[int]
    vocab: Any  # llama.cpp's vocabulary handle, which a grammar compiles against; None for a target without one
    tree_refusal: Optional[str]  # why the target verifies no trees (None: it does, through ``tree``)

    @property
    def tree(self) -> Optional[TreePasses]:
        """Its tree passes (None: it verifies chains only)."""

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Make the cache hold exactly ``tokens`` (keeping the common prefix)."""

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """Append ``tokens`` to the cache in one pass; the logits rows for the positions ``logits_for``."""

    def rollback(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` cached tokens, drop the rest."""

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (end of turn, end of text)."""

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes ``token`` stands for (may be part of a UTF-8 character)."""
