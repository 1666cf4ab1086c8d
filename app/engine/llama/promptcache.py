"""Several conversations' prompt states kept in RAM: llama.cpp server's prompt cache (``--cache-ram``).

A context holds one sequence, so a server that alternates between two conversations re-reads each one's whole
prompt on every switch: the live cache shares only the chat template's first tokens with the other one. Before
a request replaces the live sequence, its state (``llama_state_seq_get_data_ext``: the KV cells, and the
recurrent state of hybrid and recurrent memory) is copied into RAM when the request would drop more than half
of it or put a saved state in its place; when a saved state shares more of the new prompt than the live sequence does, it is put back
(``llama_state_seq_set_data_ext``) and only the rest of the prompt is decoded. Entries are kept least recently
used first within a byte budget (default 8 GiB, as llama.cpp's, and never more than ``RAM_SHARE`` of the RAM
that is free beside them); a state larger than the budget is not saved.

A restored state is the same bytes the model computed, so the output is what it would have been had the
sequence stayed in the context. What each model holds is tracked by its ``cached`` tokens, so a model that was
not restored (a draft that takes the target's cache, an MTP head) catches up by its usual reading. For
recurrent memory a restored sequence has no in-ubatch snapshots, and the checkpoint saved with it (``memory.py``)
comes back with it; the NextN rows an MTP head or an assistant drafter reads (``nextn.py``) come back too.

References: llama.cpp ``tools/server/server-task.cpp`` (``server_prompt_cache::alloc`` / ``load`` /
``update``), ``tools/server/server-context.cpp`` (``prompt_save``, ``prompt_load``, when a slot's prompt is
saved), ``include/llama.h`` (``llama_state_seq_*_ext``).
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.llama.backend import Model, common_prefix
from app.engine.llama.memory import Checkpoint

MIB = 1 << 20
DEFAULT_MIB = 8192  # llama.cpp server's --cache-ram default
RAM_SHARE = 0.5  # the cache never holds more than this share of the RAM free beside it
KEEP_FRACTION = 0.5  # the live sequence is saved when a request would keep less than this share of it (llama.cpp's)
MIN_SAVE = 16  # … and it holds at least this many tokens
MIN_GAIN = 8  # a saved state is put back when it spares at least this many tokens of decoding


def available_ram() -> int:
    """Bytes of RAM the system could give now without swapping (psutil's ``available``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def ram_limit(budget: int, held: int, available: int) -> int:
    """The most the cache may hold now: its budget, and never more than ``RAM_SHARE`` of what it holds plus what
    is free beside it (so it gives way when the machine runs short)."""
    return max(0, min(budget, int(RAM_SHARE * (held + available))))


def budget_bytes(mib: Optional[int], available: int) -> int:
    """The budget for ``--cache-ram mib`` (None: the default) on a machine with ``available`` bytes free."""
    return ram_limit((DEFAULT_MIB if mib is None else max(0, mib)) * MIB, 0, available)


def reuse(lcp: int, n_held: int, recurrent: bool, checkpoint: Optional[int] = None, snapshot: bool = False) -> int:
    """Tokens a sequence of ``n_held`` tokens spares of a prompt it shares ``lcp`` with: all of them for a KV
    cache; for recurrent memory, which cannot drop a suffix, all of them only when the whole sequence is a prefix
    (or llama.cpp's snapshots reach: ``snapshot``), else those up to the ``checkpoint`` if it lies within, else
    none (the whole prompt is decoded again)."""
    if not recurrent or lcp >= n_held or snapshot:
        return lcp
    return checkpoint if checkpoint is not None and checkpoint <= lcp else 0


def choose(reuses: Sequence[int], live: int, min_gain: int = MIN_GAIN) -> Optional[int]:
    """The entry to put back: the one that spares the most (the most recent of equals), if it beats the live
    sequence by ``min_gain`` tokens; None to keep the live one."""
    best = max(range(len(reuses)), key=lambda i: (reuses[i], i), default=None)
    return best if best is not None and reuses[best] >= live + max(1, min_gain) else None


def worth_saving(n_held: int, kept: int) -> bool:
    """Whether the live sequence of ``n_held`` tokens, of which a request keeps ``kept``, is saved first."""
    return n_held >= MIN_SAVE and kept < KEEP_FRACTION * n_held


def evictions(sizes: Sequence[int], new: int, limit: int) -> Optional[int]:
    """How many of the oldest entries (``sizes``, oldest first) go so that ``new`` more bytes fit in ``limit``;
    None when ``new`` alone does not fit (it is not saved, and nothing is evicted for it)."""
    if new > limit:
        return None
    total, n = sum(sizes), 0
    while total + new > limit:
        total -= sizes[n]
        n += 1
    return n


@dataclass
class Part:
    """One model's saved sequence: its tokens, its state's bytes, and the book-keeping that goes with them."""

    model: "weakref.ref[Model]"
    tokens: list[int]
    data: ctypes.Array
    checkpoint: Optional[Checkpoint] = None  # recurrent memory: the partial state rollbacks restart from
    rows: Optional[np.ndarray] = None  # the NextN rows of the tokens (an MTP head or assistant reads them)

    @property
    def size(self) -> int:
        return len(self.data) + (len(self.checkpoint.data) if self.checkpoint else 0) + (
            self.rows.nbytes if self.rows is not None else 0)

    def reuse(self, view: Sequence[int]) -> int:
        m = self.model()
        recurrent = m is not None and m.recurrent_memory is not None
        ck = self.checkpoint.pos if self.checkpoint is not None else None
        return reuse(common_prefix(self.tokens, view), len(self.tokens), recurrent, ck)


@dataclass
class Entry:
    target: Part
    draft: Optional[Part] = None

    @property
    def size(self) -> int:
        return self.target.size + (self.draft.size if self.draft is not None else 0)


@dataclass(frozen=True)
class Recall:
    reused: int  # prompt tokens the target's cache holds for the request (not decoded again)
    restored: int = 0  # of them, those a saved state put back (0: the live cache served, or nothing)


def live_reuse(model: Model, view: Sequence[int]) -> int:
    """Tokens of ``view`` a ``sync`` keeps from what ``model`` holds now."""
    lcp = common_prefix(model.cached, view)
    rs = model.recurrent_memory
    if rs is None:
        return lcp
    ck = rs.checkpoint.pos if rs.checkpoint is not None else None
    return reuse(lcp, len(model.cached), True, ck, rs.snapshot_ok(len(model.cached) - lcp))


def state_size(model: Model) -> int:
    return int(L.llama_state_seq_get_size_ext(model.ctx, 0, 0))


def save(model: Model, size: int) -> Optional[Part]:
    """``model``'s sequence copied into RAM (``size`` bytes, from :func:`state_size`); None if llama.cpp failed."""
    data = (ctypes.c_uint8 * size)()
    if L.llama_state_seq_get_data_ext(model.ctx, data, size, 0, 0) != size:
        return None
    rs, ck = model.recurrent_memory, None
    if rs is not None and rs.checkpoint is not None and rs.checkpoint.pos <= len(model.cached):
        ck = Checkpoint(rs.checkpoint.pos, _copy(rs.checkpoint.data))  # its buffer is reused by the next save
    rows = model.hidden.buf[:len(model.cached)].copy() if model.hidden is not None else None
    return Part(weakref.ref(model), list(model.cached), data, ck, rows)


def restore(model: Model, part: Part) -> bool:
    """Put ``part`` back as ``model``'s sequence; False (and an empty sequence) if llama.cpp refused it."""
    if model.hidden is not None and part.rows is None:
        return False  # its rows were not recorded then: a drafter reading them would read stale ones
    n = L.llama_state_seq_set_data_ext(model.ctx, part.data, len(part.data), 0, 0)
    if n != len(part.data):
        model.reset()
        return False
    model.cached = list(part.tokens)
    rs = model.recurrent_memory
    if rs is not None:
        rs.clear()  # no in-ubatch snapshots after a restore
        if part.checkpoint is not None:
            rs.checkpoint = Checkpoint(part.checkpoint.pos, _copy(part.checkpoint.data))
    if model.hidden is not None and part.rows is not None:
        model.hidden.restore(part.rows)
    return True


def _copy(data: ctypes.Array) -> ctypes.Array:
    return (ctypes.c_uint8 * len(data)).from_buffer_copy(data)


@dataclass
class PromptCache:
    """Saved sequences of one loaded pair, oldest first, within ``budget`` bytes (0: off)."""

    budget: int = field(default_factory=lambda: budget_bytes(None, available_ram()))
    available: Callable[[], int] = available_ram  # free RAM now (a test passes its own)
    entries: list[Entry] = field(default_factory=list)
    saves: int = 0
    restores: int = 0
    evicted: int = 0
    too_big: int = 0  # states not saved because they alone pass the limit

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def clear(self) -> None:
        self.entries.clear()

    def recall(self, prompt: Sequence[int], target: Model, draft: Optional[Model] = None) -> Recall:
        """Before ``prompt`` is generated from: keep the live sequence if the request would drop most of it, and
        put back the saved one that spares the most decoding where it beats the live one. ``draft``: a draft
        model with a context of its own, saved and restored beside the target (None: it catches up by reading).
        The last prompt token is never counted: the first decode step reads it."""
        view = list(prompt[:-1])
        live = live_reuse(target, view)
        if not self.enabled or target.ctx is None:
            return Recall(live)
        self.entries = [e for e in self.entries if e.target.model() is target]  # another pair's: useless here
        reuses = [e.target.reuse(view) for e in self.entries]
        best = choose(reuses, live)
        chosen = self.entries.pop(best) if best is not None else None
        if worth_saving(len(target.cached), live if chosen is None else 0):  # a restore replaces all of it
            self._keep(target, draft)
        if chosen is None:
            return Recall(live)
        if not restore(target, chosen.target):
            return Recall(0)
        self.restores += 1
        if self.size + chosen.size <= ram_limit(self.budget, self.size, self.available()):
            self.entries.append(chosen)  # kept too, the most recently used: the live sequence may drift from it
        part = chosen.draft
        if draft is not None and part is not None and part.model() is draft and \
                part.reuse(view) >= live_reuse(draft, view) + MIN_GAIN:
            restore(draft, part)  # (refused: an empty draft sequence, which reads for itself)
        return Recall(reuses[best], restored=reuses[best])

    def _keep(self, target: Model, draft: Optional[Model]) -> None:
        """Save the live sequence (the target's, and the draft's beside it) unless an entry holds it already."""
        for i, e in enumerate(self.entries):
            if common_prefix(e.target.tokens, target.cached) == len(target.cached):
                self.entries.append(self.entries.pop(i))  # held already: now the most recently used
                return
        if target.recurrent_memory is None:  # entries it extends spare nothing it does not (recurrent ones may)
            self.entries = [e for e in self.entries
                            if common_prefix(e.target.tokens, target.cached) < len(e.target.tokens)]
        sizes = [state_size(target), state_size(draft) if draft is not None and draft.cached else 0]
        new = sum(sizes) + (target.hidden.buf[:len(target.cached)].nbytes if target.hidden is not None else 0)
        held = self.size
        drop = evictions([e.size for e in self.entries], new, ram_limit(self.budget, held, self.available()))
        if drop is None:
            self.too_big += 1
            return
        del self.entries[:drop]
        self.evicted += drop
        part = save(target, sizes[0])
        if part is None:
            return
        dpart = save(draft, sizes[1]) if draft is not None and sizes[1] else None
        self.entries.append(Entry(part, dpart))
        self.saves += 1
