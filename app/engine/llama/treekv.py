"""A token tree in one ``llama_decode``, and the accepted path kept in the KV cache (``backend.Model``'s side of
tree drafts, ``decoding/tree.py``).

llama.cpp has no custom attention-mask API. A tree goes in as tokens that carry several sequence ids: each leaf
of the tree is a sequence, and a token belongs to the sequences of every leaf below it. The KV cache masks a
token's attention by the *first* sequence id it carries (``llama_kv_cache::set_input_kq_mask`` reads
``seq_id[i][0]``), so each token lists first a leaf below it: it then sees exactly the cells of that leaf's
sequence at positions up to its own — the cached history and its ancestors. The main chain (every node's first
child) is sequence 0, the one the cache always holds; the other leaves are sequences 1, 2, …

Tokens shared by several sequences ("coupled" sequences) need a unified KV cache (``llama_context_params
.kv_unified``): with one stream per sequence llama.cpp refuses such a batch ("sequential split is not supported
when there are coupled sequences in the input batch (you may need to use the -kvu flag)", ``src/llama-batch.cpp``),
and coupled sequences must hold the same cells before the pass ("sequence … is coupled to … but have diverged"),
so the history is first given to every branch sequence with ``llama_memory_seq_cp`` — in a unified cache that adds
the sequence id to the cells' metadata and copies no data. After the pass the accepted path is put in sequence 0
(``seq_rm`` of sequence 0 past where the path leaves the main chain, ``seq_cp`` of the path's leaf sequence back
to 0 over the path's positions) and every branch sequence is removed (``seq_rm(s, -1, -1)``), which frees the
cells only they held. llama.cpp's own tree example (``examples/speculative``) does the same with ``seq_keep``.

A target that keeps rows for a head (``Model.hidden``: an MTP head's or an assistant drafter's NextN rows, an
EAGLE-3 head's or a DFlash drafter's layer-input rows) records them for the tree pass too: llama.cpp writes one row
per token of the batch, in batch order (a unified cache splits a batch in order), so they go in at the root's
position onward as the batch lies, and :meth:`TreeKv.keep` moves the kept path's rows to its positions, a
sibling's included. The rows a head reads next are then those a chain pass over the kept path would have
recorded, and so are its drafts.

Recurrent and hybrid memory keep one state per sequence rather than cells (``src/llama-memory-recurrent.cpp``):
a branch there would need a state of its own for every sequence and node, a different problem; such models get
no tree (``Model.tree`` is None, ``tree_refusal`` says why, and the loop refuses in one line).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.errors import TandemError

TREE_SEQS = 16  # sequences a target context is created with: up to 15 branches beside the main chain


class TreeError(TandemError, RuntimeError):
    """Tree drafts cannot run on this target, or llama.cpp refused a tree pass."""

    hint, status, code = "use the chain proposer (draft)", 400, "invalid_value"


def tree_params(cparams: Any, model: Any, seqs: int) -> None:
    """Give a context ``seqs`` sequences in one unified KV cache, where the model's memory has cells (a recurrent
    or hybrid model keeps one sequence: see the module docstring)."""
    if seqs > 1 and not (L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model)):
        cparams.n_seq_max, cparams.kv_unified = seqs, True


def tree_refusal(recurrent: bool, ctx: Any) -> Optional[str]:
    """Why a context cannot verify trees (None: it can)."""
    if recurrent:
        return "its recurrent/hybrid memory keeps one state per sequence, not cells that branches can share"
    return "its context was created with one sequence" if L.llama_n_seq_max(ctx) < 2 else None


class TreeKv:
    """A model's tree passes: a ``llama_batch`` whose tokens may carry several sequence ids, and the sequences of
    the last pass (for :meth:`keep`)."""

    def __init__(self, model: Any):
        self.model = model
        self.seqs = int(L.llama_n_seq_max(model.ctx))
        self.size = max(model.n_batch, 1)
        self.batch = L.llama_batch_init(self.size, 0, self.seqs)
        self.node_seqs: list[list[int]] = []  # by batch index: the leaf sequences below it (first: its mask's)
        self.base = 0  # the root's position

    @classmethod
    def open(cls, model: Any, recurrent: bool) -> tuple[Optional["TreeKv"], Optional[str]]:
        """(the model's tree passes, None), or (None, why it has none)."""
        why = tree_refusal(recurrent, model.ctx)
        return (cls(model) if why is None else None), why

    def close(self) -> None:
        L.llama_batch_free(self.batch)

    def decode(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Append the tree ``tokens`` (index 0: the root, the pending token that continues the cache;
        ``parents`` by index) in one pass; the logits of every token (row ``i`` follows token ``i``'s path), a view
        of llama.cpp's buffer valid until the next pass. Afterwards the cache's sequence 0 holds the history and
        the main chain (``model.cached`` says so; its head rows, ``model.hidden``, lie by batch index until
        :meth:`keep`); :meth:`keep` keeps one path."""
        m, n = self.model, len(tokens)
        seqs = leaf_seqs(parents)
        if len(seqs[0]) > self.seqs:
            raise TreeError(f"a tree of {len(seqs[0])} leaves exceeds the {self.seqs} sequences this context holds")
        if n > self.size:
            raise TreeError(f"a tree of {n} tokens exceeds n_batch={self.size}")
        base = len(m.cached)
        if base + n > m.n_ctx:
            raise TreeError(f"{base + n} tokens exceed the context of {m.n_ctx}")
        depth = [0] * n
        for i in range(1, n):
            depth[i] = depth[parents[i]] + 1
        self._drop_branches()
        for s in range(1, len(seqs[0])):
            L.llama_memory_seq_cp(m.mem, 0, s, -1, -1)  # coupled sequences must hold the same history
        b = self.batch
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = base + depth[i]
            b.n_seq_id[i] = len(seqs[i])
            for j, s in enumerate(seqs[i]):
                b.seq_id[i][j] = s
            b.logits[i] = 1
        rc = L.llama_decode(m.ctx, b)
        if rc != 0:
            self._drop_branches()
            L.llama_memory_seq_rm(m.mem, 0, base, -1)
            raise TreeError(f"llama_decode refused a tree of {n} tokens (code {rc})")
        self.node_seqs, self.base = seqs, base
        m.cached.extend(tokens[i] for i in range(n) if 0 in seqs[i])
        m.decoded += n
        if m.hidden is not None:  # by batch index from the root's position: :meth:`keep` puts the path's in place
            m.hidden.record(base, n)
        return np.ctypeslib.as_array(L.llama_get_logits(m.ctx), shape=(n, m.n_vocab))

    def keep(self, tokens: Sequence[int], path: Sequence[int]) -> None:
        """After :meth:`decode` of ``tokens``: keep the root and the nodes ``path`` (batch indices, the root's child
        first) in sequence 0, and nothing else of the tree; the target's head rows follow the path."""
        m, seqs, base = self.model, self.node_seqs, self.base
        chain = [i for i in range(len(seqs)) if 0 in seqs[i]]  # the main chain, the root first
        nodes = [0] + list(path)
        split = next((d for d, v in enumerate(nodes) if d >= len(chain) or chain[d] != v), len(nodes))
        if split < len(nodes):  # the path leaves the main chain at depth ``split``: its leaf's sequence goes to 0
            L.llama_memory_seq_rm(m.mem, 0, base + split, -1)
            L.llama_memory_seq_cp(m.mem, seqs[nodes[-1]][0], 0, base + split, base + len(nodes))
        else:
            L.llama_memory_seq_rm(m.mem, 0, base + len(nodes), -1)
        self._drop_branches()
        del m.cached[base:]
        m.cached.extend(tokens[v] for v in nodes)
        if m.hidden is not None:
            m.hidden.keep_path(base, nodes)

    def fork(self, seq: int, pos: int) -> None:
        """Give branch sequence ``seq`` sequence 0's cells below position ``pos`` (in a unified cache: their
        metadata, no data): a branch of the context from ``pos`` on, for :meth:`decode_on` (a draft model's
        branches, ``drafters/tails.py``)."""
        if not 0 < seq < self.seqs:
            raise TreeError(f"branch sequence {seq} is not one of this context's 1..{self.seqs - 1}")
        L.llama_memory_seq_cp(self.model.mem, 0, seq, -1, pos)

    def decode_on(self, items: Sequence[tuple[int, int, int]]) -> Optional[np.ndarray]:
        """One pass of ``(sequence, token, position)`` items, each on its forked branch sequence: every item's
        logits (a view valid until the next pass), or None where llama.cpp found no room (the caller stops
        branching). Sequence 0 and ``model.cached`` stay as they were; :meth:`drop` removes the branches."""
        m, b, n = self.model, self.batch, len(items)
        if not 0 < n <= self.size:
            raise TreeError(f"a branch pass of {n} tokens does not fit n_batch={self.size}")
        b.n_tokens = n
        for i, (seq, tok, pos) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, 1
            b.seq_id[i][0] = seq
        if L.llama_decode(m.ctx, b) != 0:
            return None
        m.decoded += n
        return np.ctypeslib.as_array(L.llama_get_logits(m.ctx), shape=(n, m.n_vocab))

    def drop(self) -> None:
        """Remove every branch sequence (after :meth:`fork` and :meth:`decode_on`)."""
        self._drop_branches()

    def _drop_branches(self) -> None:
        """Remove every branch sequence (1 ..): the cells only they held are freed."""
        for s in range(1, self.seqs):
            L.llama_memory_seq_rm(self.model.mem, s, -1, -1)


def leaf_seqs(parents: Sequence[int]) -> list[list[int]]:
    """For a tree given by ``parents`` (by index; ``parents[0]`` is ignored: index 0 is the root), the sequence
    ids of the leaves below each node, smallest first; the leaf reached by first children is sequence 0."""
    n = len(parents)
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        if not 0 <= parents[i] < i:
            raise TreeError(f"tree node {i}'s parent {parents[i]} is not an earlier node")
        kids[parents[i]].append(i)
    order, stack = [], [0]  # leaves numbered depth first, first children first: the main chain's leaf is 0
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(reversed(kids[v]))
    leaf_id = {v: s for s, v in enumerate(v for v in order if not kids[v])}
    seqs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n - 1, -1, -1):  # children come after parents: fill from the bottom
        seqs[v] = [leaf_id[v]] if not kids[v] else sorted(s for c in kids[v] for s in seqs[c])
    return seqs
