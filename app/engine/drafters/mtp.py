"""MTP: the target drafts for itself with its multi-token-prediction (NextN) head; no second model.

Qwen3.5/3.6, GLM-4.x, DeepSeek, MiMo and others ship one more decoder block after the trunk: at position
``p + 1`` it reads the token ``x_{p+1}`` and the target's hidden row ``h_p`` and predicts ``x_{p+2}``. llama.cpp
runs it as a second context of type ``LLAMA_CONTEXT_TYPE_MTP`` on the *same* loaded model, with a KV cache of
its own holding that block only. The protocol (``common/speculative.cpp``, ``common_speculative_impl_draft_mtp``,
the single-head mode):

- the target's context outputs its NextN row ``h_p`` for every decoded token (``nextn.HiddenRows``);
- the head's cache holds, at position ``j``, the entry ``(x_j, h_{j-1})`` (``h_{-1}`` = zeros); entries are
  fed in batches as the target accepts tokens (llama.cpp's ``process``);
- to draft after a history of ``n`` tokens, the head decodes ``(x_{n-1}, h_{n-2})`` at ``n - 1``: its logits
  give ``d_1``, its own NextN row ``g_1`` pairs with ``d_1`` at ``n`` for ``d_2``, and so on;
- the drafted entries pair tokens with the head's rows, not the target's, so they are dropped before the next
  feed even where the target accepts the tokens (unlike a draft model's cache).

:class:`MtpHead` is that context with the small ``Model``-like surface that
:class:`~app.engine.drafters.draftmodel.DraftModelProposer` drives (``protocol.DraftSource``), so
:class:`MtpProposer` samples, couples and stops on ``p_min`` exactly as the draft model does, and goes through the
same verification: its output is the target's, whatever the head proposes.

References: llama.cpp ``common/speculative.cpp`` (``common_speculative_impl_draft_mtp``),
``src/models/qwen35.cpp`` (``graph_mtp``), ``src/llama-ext.h``; Gloeckle et al. 2024, "Better & faster large
language models via multi-token prediction"; DeepSeek-AI 2024, "DeepSeek-V3 technical report" (MTP modules).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.llama import nextn
from app.engine.llama.backend import BackendError, ContextFullError, Model, RollbackError, common_prefix
from app.engine.llama.lifetime import Closable
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.drafters.protocol import Draft, DraftSource
from app.engine.drafters.readcost import ReadCosts
from app.engine.names import ProposerName

# A catch-up of at most this many entries is every step's work for an MTP head (the accepted tokens and the
# next one: at most the longest draft + 1), so its time counts as drafting; a longer one is a one-off.
STEADY_CATCH_UP = 17


class MtpUnavailable(BackendError):
    """The target carries no MTP head this llama.cpp can run."""

    hint, status, code = "choose a draft model or prompt lookup for this target", 400, "invalid_value"


def mtp_reason(target: Model) -> Optional[str]:
    """Why ``target`` cannot draft for itself, or None if it can."""
    model = target.model
    if target.hidden is not None and (model is None or nextn.n_heads(model) > 0):
        return None  # (rows kept for an assistant drafter, assistant.py, are no MTP head)
    if model is None:
        return "this target runs on other machines (RPC); its MTP head is not reachable from here"
    why = nextn.mtp_unavailable(target.meta("general.architecture"), nextn.n_heads(model))
    if why is None and not target.options.load_mtp:
        why = "the model was loaded without its MTP layers"
    return why or "the MTP head is not available"


class MtpHead(Closable):
    """The MTP context on ``target``'s model: the entries ``(x_j, h_{j-1})`` for a prefix of the history."""

    def __init__(self, target: Model):
        why = mtp_reason(target)
        if why is not None:
            raise MtpUnavailable(f"{target.path.name}: {why}")
        self.target, self.hidden = target, target.hidden
        self.path = target.path
        self.n_ctx, self.n_batch, self.n_vocab = target.n_ctx, target.n_batch, target.n_vocab
        cparams = L.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch, cparams.n_seq_max = self.n_ctx, self.n_batch, self.n_batch, 1
        cparams.n_threads = cparams.n_threads_batch = target.n_threads
        cparams.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(target.model, cparams)
        if not self.ctx:
            raise MtpUnavailable(f"{target.path.name}: llama.cpp could not create its MTP context")
        # unmasked: a row for every entry, indexed by its place in the batch. (Masked, this build copies the
        # first n_outputs rows of the batch, not the rows asked for: right only for one-entry batches.)
        nextn.set_embeddings_nextn(self.ctx, True, False)
        if nextn.set_nextn_layer_offset is not None:
            nextn.set_nextn_layer_offset(self.ctx, 0)  # the first head, for every draft step
        self.mem = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_ext_init(self.ctx)
        self.n_embd = self.hidden.n_embd
        self.cached: list[int] = []  # tokens whose entries are in the cache (drafted ones included)
        self.n_clean = 0  # of ``cached``: entries paired with the target's rows (a prefix of the history)
        self.g_last = np.zeros(self.n_embd, dtype=np.float32)  # the head's own row after its last output
        self._closed = False

    @property
    def n_past(self) -> int:
        return len(self.cached)

    def _process(self, tokens: Sequence[int], rows: np.ndarray, want_logits: bool) -> Optional[np.ndarray]:
        """Append entries ``(tokens[i], rows[i])`` in one ``llama_process``; the last entry's logits (a view,
        valid until the next call) when ``want_logits``, its NextN row kept as ``g_last``."""
        start = len(self.cached)
        if start + len(tokens) > self.n_ctx:
            raise ContextFullError(f"{start + len(tokens)} tokens exceed the context of {self.n_ctx}")
        out = process_entries(self, tokens, range(start, start + len(tokens)), rows, want_logits)
        self.cached.extend(int(t) for t in tokens)
        return out

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Make the cache hold the entries for ``tokens`` paired with the target's rows, keeping the common
        prefix; with ``need_logits``, a copy of the last entry's logits (the head's guess for the next token).
        The target must have decoded ``tokens[:-1]`` (its rows are read)."""
        if len(tokens) - 1 > self.target.n_past:
            raise BackendError(f"the MTP head needs the target's rows up to position {len(tokens) - 2}")
        keep = min(common_prefix(self.cached, tokens), self.n_clean)
        if need_logits and tokens:
            keep = min(keep, len(tokens) - 1)
        self.rollback(keep)
        logits = None
        for start in range(keep, len(tokens), self.n_batch):
            stop = min(start + self.n_batch, len(tokens))
            rows = np.stack([self.hidden.row(j - 1) for j in range(start, stop)])
            out = self._process(tokens[start:stop], rows, need_logits and stop == len(tokens))
            if out is not None:
                logits = np.array(out, copy=True)
        self.n_clean = len(self.cached)
        return logits

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """Append one drafted token, paired with the head's own last row; its logits as a (1, n_vocab) view."""
        if len(tokens) != 1:
            raise BackendError("the MTP head drafts one token at a time")
        return self._process(tokens, self.g_last[None, :], True)[None, :]

    def missing(self, tokens: Sequence[int]) -> int:
        """Entries a :meth:`sync` to ``tokens`` would feed."""
        return len(tokens) - min(common_prefix(self.cached, tokens), self.n_clean)

    def is_eog(self, token: int) -> Optional[bool]:
        """None: the head has no vocabulary of its own to tell (the loop cuts the draft at the target's end)."""
        return None

    def rollback(self, n_keep: int) -> None:
        """Drop every entry at positions >= ``n_keep`` (a plain KV cache: checked)."""
        if n_keep >= len(self.cached):
            return
        if not L.llama_memory_seq_rm(self.mem, 0, n_keep, -1):
            raise RollbackError(f"{self.path.name}: the MTP head's cache refused to roll back to {n_keep}")
        del self.cached[n_keep:]
        self.n_clean = min(self.n_clean, n_keep)

    def reset(self) -> None:
        L.llama_memory_clear(self.mem, True)
        self.cached.clear()
        self.n_clean = 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        L.llama_batch_ext_free(self.batch)
        L.llama_free(self.ctx)


def process_entries(head, tokens: Sequence[int], positions: Sequence[int], rows: np.ndarray,
                    want_logits: bool) -> Optional[np.ndarray]:
    """Decode entries ``(tokens[i], rows[i])`` at ``positions[i]`` in one ``llama_process`` on ``head``'s
    context (``head``: ``ctx``, ``batch``, ``n_embd``, ``n_vocab``, ``path``, ``g_last``); the last entry's
    logits (a view, valid until the next call) when ``want_logits``, its NextN row kept as ``head.g_last``."""
    n = len(tokens)
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    pos = (L.llama_pos * 1)()
    L.llama_batch_ext_clear(head.batch)
    for i, tok in enumerate(tokens):
        idx = L.llama_batch_ext_add_token(head.batch, 0, int(tok))
        pos[0] = positions[i]
        embd = L.llama_embd(rows[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, head.n_embd)
        if idx < 0 or not L.llama_batch_ext_set_pos(head.batch, idx, pos) \
                or not L.llama_batch_ext_set_embd_token(head.batch, idx, embd):  # (the batch copies the row)
            raise BackendError(f"{head.path.name}: the drafting batch refused entry {i} (code {idx})")
        if want_logits and i == n - 1:
            L.llama_batch_ext_set_output_logits(head.batch, idx, True)
    rc = L.llama_process(head.ctx, L.LLAMA_PROCESS_TYPE_DECODE, head.batch)
    if rc != 0:
        raise BackendError(f"{head.path.name}: the drafting decode failed with code {rc}")
    if not want_logits:
        return None
    g = nextn.get_embeddings_nextn_ith(head.ctx, n - 1)
    head.g_last = np.ctypeslib.as_array(g, shape=(head.n_embd,)).copy()
    return np.ctypeslib.as_array(L.llama_get_logits_ith(head.ctx, n - 1), shape=(head.n_vocab,))


class MtpProposer(DraftModelProposer):
    """The target's own MTP head drafts: the draft model's sampling, coupling and ``p_min`` rule, on
    :class:`MtpHead`. Its catch-up on the tokens just accepted is part of every step's cost here (the
    drafted entries are never kept), so it is timed as drafting, not as a one-off."""

    name: str = ProposerName.MTP

    def __init__(self, head: DraftSource, p_min: float = 0.0, costs: Optional[ReadCosts] = None):
        """``head``: an :class:`MtpHead`, or an assistant drafter (assistant.py)."""
        super().__init__(head, p_min, costs=costs)

    def _learn_reading(self, synced: int, t_sync: float) -> None:
        if synced > STEADY_CATCH_UP:  # shorter catch-ups are drafting (above), not reading
            super()._learn_reading(synced, t_sync)

    def propose(self, history: Sequence[int], k: int, sampler, rng, sample: bool, noise=None, handoff=None,
                reach: int = 0) -> Draft:
        draft = super().propose(history, k, sampler, rng, sample, noise, handoff=handoff, reach=reach)
        if draft.synced <= STEADY_CATCH_UP:
            draft.synced, draft.t_sync = 1, 0.0
        return draft
