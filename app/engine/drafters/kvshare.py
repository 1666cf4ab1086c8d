"""The draft model takes the target's KV cache instead of reading the history itself, where the two are one
network quantized twice (the demo pair: an F32 target derived from the Q4_1 draft).

A draft model must hold the history in its own cache before it drafts: after the target kept a fully accepted
draft it reads the last draft token and the target's bonus token (2 tokens), and after a stretch of prompt
lookup's tokens (``duo.py``) it reads all of them. On a CPU that reading is compute-bound: a quantized draft
model without a batched matrix kernel there reads a token at about the cost of the target verifying it. Yet
the target has just computed keys and values for exactly those positions. Where the
two models share the network's shape (architecture, layers, width, attention heads, parameter count: the same
network at another precision), their caches have the same layout and nearly the same contents, so the draft
takes a copy of the target's sequence (``llama_state_seq_get_data`` → ``llama_state_seq_set_data``,
microseconds per cached token) and reads only what the target has not (the pending token, and a lookup
proposal it drafts past). The draft model guesses about as well from the target's cache as from its own
(``scripts/draft_context.py`` compares them).

It changes only what the draft model conditions on, never what is emitted: the target verifies every token
as before, and ``q`` is still the distribution each draft token was drawn from. A copy is taken only when it
is expected to cost less than the reading it saves (both timed as they happen); llama.cpp checks the layout
(layer count, key and value types, row sizes, transposition) and refuses a copy that does not fit, after which
the draft model reads for itself again.

References: Zhao et al., *QSpec: Speculative Decoding with Complementary Quantization Schemes* (2024) — a
low-precision draft and a high-precision verifier of one model sharing one KV cache; llama.cpp
``src/llama-kv-cache.cpp`` (``state_write`` / ``state_read``, the sequence state's format and its checks).
"""

from __future__ import annotations

import ctypes
import time
from collections import deque
from typing import Optional, Sequence

import llama_cpp as L

from app.engine.llama.backend import Model
from app.engine.control.costs import lower_median
from app.engine.llama.llamalog import quiet_logs

READ_PRIOR = 0.5  # before a batched read was timed: a token of a batch costs this share of one read alone


def share_reason(target: Model, draft: Model) -> Optional[str]:
    """Why the draft model cannot take ``target``'s cache (None: it can try; llama.cpp checks the layout)."""
    if draft.recurrent_memory is not None or target.recurrent_memory is not None:
        return "recurrent memory"
    if target.options.rpc:
        return "the target is split over RPC workers"
    if draft.hidden is not None:
        return "the draft model records hidden rows"

    def shape(m: Model) -> tuple:
        return (m.meta("general.architecture"), L.llama_model_n_layer(m.model), L.llama_model_n_embd(m.model),
                L.llama_model_n_head(m.model), L.llama_model_n_head_kv(m.model), m.n_params)

    if shape(target) != shape(draft):
        return "the two are different networks"
    return None


def in_use(share: Optional["KvShare"]) -> bool:
    """Whether a draft model with ``share`` takes the target's cache: one llama.cpp has not refused."""
    return share is not None and share.refused is None


class KvShare:
    """The draft model's copies of the target's cache (``pull``), taken when worth it (``offer``)."""

    def __init__(self, target: Model, draft: Model):
        self.target, self.draft = target, draft
        self.refused: Optional[str] = None  # why llama.cpp refused a copy: the draft model reads for itself
        self._buf: Optional[ctypes.Array] = None
        self.copy_s: deque = deque(maxlen=8)  # seconds per cached token copied
        self.read_s: deque = deque(maxlen=8)  # seconds per token the draft model read in a batch of 2 or more
        self.step_s: deque = deque(maxlen=8)  # seconds it took to read one token alone (a drafting step's cost)
        self.pulls = 0
        self.saved = 0  # history tokens the draft model did not have to read

    def worth(self, saved: int, n_cached: int) -> bool:
        """Is copying ``n_cached`` tokens' entries expected to cost less than reading ``saved`` tokens?"""
        if self.refused is not None or saved < 1:
            return False
        copy = lower_median(self.copy_s)
        read = lower_median(self.read_s)
        if read is None:
            step = lower_median(self.step_s)
            read = READ_PRIOR * step if step is not None else None
        return copy is None or read is None or copy * n_cached < saved * read

    def offer(self, view: Sequence[int], need_logits: bool = True) -> bool:
        """Before the draft model syncs to ``view``: take the target's cache if that saves reading. The draft
        model then holds what the target holds, and its sync reads only the rest (and rolls back whatever the
        target holds past ``view``)."""
        last = len(view) - 1 if need_logits else len(view)  # sync re-reads the last token for its logits
        has = min(len(view) - self.target.missing(view), last)
        saved = has - min(len(view) - self.draft.missing(view), last)
        if not self.worth(saved, len(self.target.cached)):
            return False
        return self.pull(saved)

    def pull(self, saved: int = 0) -> bool:
        """Copy the target's sequence into the draft model's context; False (and an empty draft cache) if
        llama.cpp refused it."""
        t0 = time.perf_counter()
        src, dst = self.target, self.draft
        size = L.llama_state_seq_get_size(src.ctx, 0)
        if self._buf is None or len(self._buf) < size:
            self._buf = (ctypes.c_uint8 * (size + size // 4))()
        got = L.llama_state_seq_get_data(src.ctx, self._buf, size, 0)
        quiet_logs()
        put = L.llama_state_seq_set_data(dst.ctx, self._buf, got, 0) if got else 0
        if not got or put != got:
            self.refused = f"llama.cpp refused the target's cache for the draft model ({got} bytes, {put} taken)"
            dst.reset()  # a refused copy has emptied the draft's sequence
            return False
        dst.cached = list(src.cached)
        if src.cached:
            self.copy_s.append((time.perf_counter() - t0) / len(src.cached))
        self.pulls += 1
        self.saved += saved
        return True

    def timed_read(self, n: int, seconds: float) -> None:
        """The draft model read ``n`` tokens in one batch in ``seconds``."""
        (self.step_s if n == 1 else self.read_s).append(seconds / n)
