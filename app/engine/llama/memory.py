"""Rolling back recurrent and hybrid memory (LFM2, Qwen3.5/3.6, Nemotron-H, Granite-4-H, …).

A transformer's KV cache drops any suffix (``llama_memory_seq_rm``). A recurrent state cannot: it only holds
"now". The llama.cpp vendored here keeps, for archs listed in ``llm_arch_supports_rs_rollback``, ``n_rs_seq``
snapshots of the state *within the last ubatch* (slot s = the state s tokens back), and ``seq_rm`` may then
drop up to ``n_rs_seq`` trailing tokens once per decode. So a verification pass of ``[last] + K draft
tokens`` rolls back ``K - n`` tokens exactly when K <= n_rs_seq and the K + 1 tokens were one ubatch.

Anything else (a draft model that decoded its tokens one at a time, a chat turn that rewrites the end of the
previous one) restores a *checkpoint* instead: the recurrent part of the sequence's state saved with
``llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)`` after each ``sync`` (the attention
part is trimmed by ``seq_rm``), then decodes the tokens between the checkpoint and the kept prefix. With no
usable checkpoint the sequence is decoded again from its start (counted, and said once).

References: llama.cpp ``src/llama-memory-recurrent.cpp`` (``seq_rm``: "partial rollback via per-token
snapshot index (bounded by n_rs_seq)", "pending rollback is single-use"), ``tools/server/server-context.cpp``
(speculative checkpoints with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``).
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass, field
from typing import Optional

import llama_cpp as L

# Snapshots asked for per sequence: the longest draft auto K may reach (loop.DEFAULT_K_MAX = 16) plus one.
DEFAULT_RS_SNAPSHOTS = 17


class Way(enum.Enum):
    """How a rollback was done."""

    SNAPSHOT = "snapshot"  # llama.cpp's in-ubatch state snapshots: free
    CHECKPOINT = "checkpoint"  # restore the saved state, decode the tokens after it
    REPREFILL = "re-prefill"  # no usable snapshot or checkpoint: decode the whole sequence again


@dataclass
class Checkpoint:
    pos: int  # tokens cached when it was saved
    data: ctypes.Array


@dataclass
class RecurrentMemory:
    """Book-keeping for one context's recurrent sequence 0 (``Model`` drives it)."""

    ctx: object
    n_rs_seq: int  # snapshots llama.cpp keeps (0: this arch cannot roll back partially)
    last_batch: int = 0  # tokens in the last decode (snapshots exist only within it)
    pending: bool = False  # a snapshot rollback since the last decode (llama.cpp allows one)
    checkpoint: Optional[Checkpoint] = None
    counts: dict = field(default_factory=lambda: {w: 0 for w in Way})
    notice: Optional[str] = None  # why a re-prefill happened, said once

    def clear(self) -> None:
        """The sequence was emptied or replaced whole: no snapshots, no checkpoint."""
        self.checkpoint, self.pending, self.last_batch = None, False, 0

    def decoded(self, n: int) -> None:
        self.last_batch, self.pending = n, False

    def snapshot_ok(self, r: int) -> bool:
        """Whether dropping the last ``r`` tokens can use llama.cpp's snapshots."""
        return not self.pending and 1 <= r <= min(self.n_rs_seq, self.last_batch - 1)

    def rolled_back(self, way: Way) -> None:
        self.counts[way] += 1
        if way is Way.SNAPSHOT:
            self.pending = True

    def save(self, pos: int) -> None:
        """Save the recurrent part of the state (its attention part stays in the KV cache)."""
        if self.checkpoint is not None and self.checkpoint.pos == pos:
            return
        flags = L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = L.llama_state_seq_get_size_ext(self.ctx, 0, flags)
        buf = self.checkpoint.data if self.checkpoint and len(self.checkpoint.data) == size else (ctypes.c_uint8 * size)()
        if L.llama_state_seq_get_data_ext(self.ctx, buf, size, 0, flags) != size:
            self.checkpoint = None
            return
        self.checkpoint = Checkpoint(pos, buf)

    def restore(self) -> bool:
        """Put the checkpoint's state back; False if llama.cpp refused it."""
        ck = self.checkpoint
        flags = L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        ok = ck is not None and L.llama_state_seq_set_data_ext(self.ctx, ck.data, len(ck.data), 0, flags) > 0
        self.pending = False
        return ok

    def forget(self, n_keep: int) -> None:
        """The sequence was cut below the checkpoint: it no longer describes a prefix."""
        if self.checkpoint is not None and self.checkpoint.pos > n_keep:
            self.checkpoint = None


def recurrent_rollback(model, n_keep: int) -> None:
    """``model.rollback`` on recurrent memory: in-ubatch snapshots when they reach, else the last checkpoint,
    else decode the kept prefix again. ``model`` is a ``backend.Model`` whose ``recurrent_memory`` is set."""
    rs: RecurrentMemory = model.recurrent_memory
    cached = model.cached
    if rs.snapshot_ok(len(cached) - n_keep) and model.seq_rm(n_keep):
        del cached[n_keep:]
        rs.rolled_back(Way.SNAPSHOT)
        return
    ck = rs.checkpoint
    if ck is not None and ck.pos <= n_keep and rs.restore() and model.seq_rm(ck.pos):
        redo, way = cached[ck.pos:n_keep], Way.CHECKPOINT
        del cached[ck.pos:]
    else:
        if rs.notice is None:
            rs.notice = (f"{model.path.name}: its recurrent memory cannot drop the last {len(cached) - n_keep} "
                         f"tokens (no snapshot or checkpoint reaches); the {n_keep} kept tokens are decoded again")
        redo, way = cached[:n_keep], Way.REPREFILL
        model.reset()
    for start in range(0, len(redo), model.n_batch):
        model.decode(redo[start:start + model.n_batch], ())
    rs.forget(n_keep)
    rs.rolled_back(way)
