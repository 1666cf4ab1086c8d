"""EAGLE-3: a separate small GGUF (arch ``eagle3``) that drafts from the inputs of three of the target's layers.
It is the MTP drafter with its own one-layer cache, behind the same protocol.

An EAGLE-3 head has an encoder, ``fc``, that fuses the target's three layer-input rows at a position ``P`` into
one row ``g_P`` (llama.cpp runs it as ``LLAMA_PROCESS_TYPE_ENCODE``), and one decoder layer with a KV cache of
its own. Where it has no token embeddings or output matrix of its own it borrows the target's: its context is
tied to the target's (``llama_context_params.ctx_other``), but unlike the Gemma-4 assistant its cache is its own.
The protocol (``common/speculative.cpp``, ``common_speculative_impl_draft_eagle3``):

- the target's context outputs the inputs of the head's layers for every decoded token (``eagle3rows.LayerRows``);
- the head's cache holds, at position ``P``, the entry ``(x_{P+1}, g_P)``: the token *after* the row's position
  (llama.cpp's "left shift"), so the first token of the sequence has no entry and the entry of the history's last
  token is written only once that token is known (llama.cpp's deferred boundary row);
- to draft after a history of ``n`` tokens (the target holds the first ``n - 1``), the head decodes
  ``(x_{n-1}, g_{n-2})`` at ``n - 2``: its logits give ``d_1``, its own pre-norm row ``g'_1`` pairs with ``d_1`` at
  ``n - 1`` for ``d_2``, and so on;
- the drafted entries pair tokens with the head's rows, not the target's, so they are dropped before the next
  feed even where the target accepts the tokens (llama.cpp's ``accept`` moves the boundary back the same way).

This build's decoder graph computes logits for every entry of a batch and llama.cpp copies the *first* rows
asked for (there is no output selection in ``src/models/eagle3.cpp``), so an entry whose logits are read is
always decoded alone, as llama.cpp's driver does.

:class:`Eagle3Model` is that head with the ``Model`` surface that :class:`~app.engine.drafters.mtp.MtpProposer`
drives (``protocol.DraftSource``), so it samples, couples, stops on ``p_min`` and is verified as every draft is:
the output is the target's, whatever the head proposes.

References: llama.cpp ``src/models/eagle3.cpp``, ``src/llama-context.cpp`` (``encode``, ``extract_layer_inputs``),
``common/speculative.cpp``; Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models
via Training-Time Test".
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.llama import eagle3rows, nextn
from app.engine.llama.backend import BackendError, ContextFullError, LoadOptions, Model, RollbackError, common_prefix
from app.engine.llama.eagle3rows import HeadKind, LayerRows
from app.engine.drafters import assistant
from app.engine.drafters.mtp import process_entries
from app.engine.names import DraftKind

ARCH = "eagle3"
LABEL = DraftKind.EAGLE3  # how the app names this kind of draft


class Eagle3Error(BackendError):
    """An EAGLE-3 head that cannot draft for this target."""

    hint, status, code = "load an EAGLE-3 head beside the target model it was trained for", 400, "invalid_value"


def is_eagle3(path: Path | str) -> bool:
    return assistant.gguf_arch(path) == ARCH


def open_draft(path: Path | str, options: LoadOptions, target: Model) -> Model:
    """Load a draft GGUF beside ``target``: an EAGLE-3 head or an assistant drafter tied to the target's context,
    else a model."""
    return Eagle3Model(path, options, target) if is_eagle3(path) else assistant.open_draft(path, options, target)


class Eagle3Model(Model):
    """An EAGLE-3 GGUF with a context tied to ``target``'s: drafts from the target's layer rows, its own cache."""

    def __init__(self, path: Path | str, options: LoadOptions, target: Model):
        self.target = target
        self.rows: Optional[LayerRows] = None
        self.n_clean = 0  # of ``cached``: tokens whose entries pair them with the target's rows
        self.g_last = np.zeros(0, dtype=np.float32)
        super().__init__(path, options)

    @property
    def cached(self) -> list[int]:
        """The tokens whose entries the cache holds (the first token has none), drafted ones included."""
        return self._cached

    @cached.setter
    def cached(self, tokens: list[int]) -> None:
        # a sequence put in from outside (a restored prompt state) may hold drafted entries: none is trusted
        self._cached = list(tokens)
        self.n_clean = 0

    def _load(self, options: LoadOptions) -> None:
        t = self.target
        why = eagle3rows.target_refusal(t, HeadKind.EAGLE3)  # before anything is loaded or turned on
        if why is not None:
            raise Eagle3Error(f"{self.path.name}: {why}")
        t_arch = t.meta("general.architecture")
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if options.n_gpu_layers < 0 else options.n_gpu_layers
        mparams.load_mode = L.LLAMA_LOAD_MODE_MMAP if options.mmap else L.LLAMA_LOAD_MODE_NONE
        self._load_model(mparams)
        layers = eagle3rows.head_layers(self.model)
        n_embd_t = int(L.llama_model_n_embd(t.model))
        why = eagle3rows.refusal(t_arch, int(L.llama_model_n_layer(t.model)), n_embd_t, layers,
                                 int(self.meta(f"{ARCH}.target_hidden_size") or 0))
        if why is None and t.hidden is not None and not (
                isinstance(t.hidden, LayerRows) and t.hidden.layers == tuple(layers)):
            why = ("the target keeps other rows (for its MTP head, an assistant drafter or another EAGLE-3 head): "
                   "load the target without its MTP layers, or unload the other draft first")
        if why is not None:
            L.llama_model_free(self.model)
            raise Eagle3Error(f"{self.path.name}: {why}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = t.n_ctx  # positions as the target's
        cparams.n_batch = cparams.n_ubatch = options.n_batch  # (the encoder takes at most n_ubatch rows a call)
        cparams.n_seq_max = 1
        cparams.n_rs_seq = 0
        cparams.n_threads = cparams.n_threads_batch = self.n_threads = options.n_threads or t.n_threads
        cparams.ctx_other = t.ctx  # the target's token embeddings and output matrix, where it has none
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise Eagle3Error(f"{self.path.name}: llama.cpp could not tie the EAGLE-3 head to the target's "
                              f"context ({t.path.name})")
        # unmasked: its pre-norm row for every entry by its place in the batch (the encoder's output, g, included)
        nextn.set_embeddings_nextn(self.ctx, True, False)
        if t.hidden is None:  # the target's rows: for every token from now on (its cache restarts to have them)
            t.hidden = LayerRows(t.ctx, layers, n_embd_t)
            t.reset()
        assert isinstance(t.hidden, LayerRows)
        self.rows = t.hidden
        self.rows.heads += 1
        self.batch = L.llama_batch_ext_init(self.ctx)
        self.batch_enc = L.llama_batch_ext_init(self.ctx)
        self.n_embd = int(L.llama_model_n_embd(self.model))
        self.g_last = np.zeros(self.n_embd, dtype=np.float32)

    # --- the drafting protocol (MtpProposer drives it as it drives an MTP head) ------------------------

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """``g`` for each row of the target's (``fc`` over the three layer inputs), one ENCODE per ``n_batch``."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        out = np.empty((len(rows), self.n_embd), dtype=np.float32)
        width = rows.shape[1]
        pos = (L.llama_pos * 1)()
        # the encoder reads no position, but the batch's are checked against the cache's: they must follow it
        after = int(L.llama_memory_seq_pos_max(self.mem, 0)) + 1
        for start in range(0, len(rows), self.n_batch):
            chunk = rows[start:start + self.n_batch]
            L.llama_batch_ext_clear(self.batch_enc)
            for i in range(len(chunk)):
                embd = L.llama_embd(chunk[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, width)
                idx = L.llama_batch_ext_add_embd(self.batch_enc, 0, embd)
                pos[0] = after + i
                if idx < 0 or not L.llama_batch_ext_set_pos(self.batch_enc, idx, pos):
                    raise BackendError(f"{self.path.name}: the encoder's batch refused row {i} (code {idx})")
            rc = L.llama_process(self.ctx, L.LLAMA_PROCESS_TYPE_ENCODE, self.batch_enc)
            if rc != 0:
                raise BackendError(f"{self.path.name}: the EAGLE-3 encoder failed with code {rc}")
            g = nextn.get_embeddings_nextn(self.ctx)
            out[start:start + len(chunk)] = np.ctypeslib.as_array(g, shape=(len(chunk), self.n_embd))
        return out

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Make the cache hold the entries for ``tokens`` paired with the target's rows, keeping the common
        prefix; with ``need_logits``, a copy of the last entry's logits (the head's guess for the next token).
        The target must have decoded ``tokens[:-1]`` (its rows are read)."""
        n = len(tokens)
        if n - 1 > self.target.n_past:
            raise BackendError(f"the EAGLE-3 head needs the target's rows up to position {n - 2}")
        if n > self.n_ctx:
            raise ContextFullError(f"{n} tokens exceed the context of {self.n_ctx}")
        keep = min(common_prefix(self._cached, tokens), self.n_clean)
        if need_logits and tokens:
            keep = min(keep, n - 1)
        self.rollback(keep)
        if not self._cached and tokens:
            self._cached.append(int(tokens[0]))  # the first token has no entry (no row before it)
        first = len(self._cached)
        if n > first:
            rows = self.rows
            assert rows is not None
            g = self.encode(np.stack([rows.row(j - 1) for j in range(first, n)]))
            last = n - 1 if need_logits else n  # the entry whose logits are read goes alone
            for start in range(first, last, self.n_batch):
                stop = min(start + self.n_batch, last)
                process_entries(self, tokens[start:stop], range(start - 1, stop - 1), g[start - first:stop - first],
                                False)
                self._cached.extend(int(x) for x in tokens[start:stop])
            if need_logits:
                logits = np.array(process_entries(self, tokens[-1:], [n - 2], g[-1:], True), copy=True)
                self._cached.append(int(tokens[-1]))
                self.n_clean = len(self._cached)
                return logits
        self.n_clean = len(self._cached)
        # nothing to decode, or one token (no row to pair it with): the head knows nothing yet
        return np.zeros(self.n_vocab, dtype=np.float32) if need_logits else None

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """Append one drafted token, paired with the head's own last row; its logits as a (1, n_vocab) view."""
        if len(tokens) != 1:
            raise BackendError("the EAGLE-3 head drafts one token at a time")
        if not self._cached:  # timed with nothing read: the token stands in for its own predecessor
            self._cached.append(int(tokens[0]))
        if len(self._cached) > self.n_ctx:
            raise ContextFullError(f"{len(self._cached)} tokens exceed the context of {self.n_ctx}")
        out = process_entries(self, tokens, [len(self._cached) - 1], self.g_last[None, :], True)
        self._cached.append(int(tokens[0]))
        return out[None, :]

    def missing(self, tokens: Sequence[int]) -> int:
        """Entries a :meth:`sync` to ``tokens`` would feed."""
        return len(tokens) - min(common_prefix(self._cached, tokens), self.n_clean)

    def rollback(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens: drop every entry at positions >= ``n_keep - 1`` (a plain KV cache)."""
        if n_keep >= len(self._cached):
            return
        if not L.llama_memory_seq_rm(self.mem, 0, max(n_keep - 1, 0), -1):
            raise RollbackError(f"{self.path.name}: the EAGLE-3 head's cache refused to roll back to {n_keep}")
        del self._cached[n_keep:]
        self.n_clean = min(self.n_clean, n_keep)

    def reset(self) -> None:
        L.llama_memory_clear(self.mem, True)
        self._cached.clear()
        self.n_clean = 0

    def close(self) -> None:
        if self._closed:
            return
        L.llama_batch_ext_free(self.batch)
        L.llama_batch_ext_free(self.batch_enc)
        rows = self.rows
        if rows is not None:
            rows.heads -= 1
            if rows.heads == 0 and not self.target.closed:  # the last one turns them off
                rows.off()
                self.target.hidden = None
        super().close()
