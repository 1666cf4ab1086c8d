"""The Gemma-4 assistant drafter: a separate small GGUF (arch ``gemma4-assistant``) that drafts for a Gemma-4
target by reading the target's own KV cache. It is the MTP drafter with shared memory, behind the same protocol.

Google ships an "assistant" next to each Gemma-4 model: a few decoder blocks that take the target's embedding
of the token ``x_p`` and the target's final hidden row ``h_{p-1}`` and predict ``x_{p+1}``. llama.cpp runs it
as a context of its own model tied to the target's context (``llama_context_params.ctx_other``): its KV cache
is a view of the target's (each sliding-window layer reads the target's last sliding-window layer, each full
layer the target's last layer), so it never writes an entry and has nothing to catch up on or roll back. The
protocol (``common/speculative.cpp``, ``common_speculative_impl_draft_mtp`` with ``is_mem_shared``):

- the target's context outputs its hidden row ``h_p`` for every decoded token (``nextn.HiddenRows``);
- to draft after a history of ``n`` tokens (the target's cache holds the first ``n - 1``), the assistant
  decodes ``(x_{n-1}, h_{n-2})`` at position ``n - 1``: its logits give ``d_1``, its own row ``g_1`` pairs
  with ``d_1`` *at the same position* ``n - 1`` for ``d_2``, and so on (Gemma-4's assistant keeps the position
  of the last verified token for every draft step);
- its attention sees the target's cache as it is, so the target must hold exactly ``history[:-1]`` when it
  drafts (the decode loop's invariant), and its memory must never be cleared from its side (the cells are the
  target's).

:class:`AssistantModel` is that context with the ``Model`` surface that :class:`~app.engine.drafters.mtp.MtpProposer`
drives (``protocol.DraftSource``), so it samples, couples, stops on ``p_min`` and is verified as every draft is:
the output is the target's, whatever the assistant proposes.

References: llama.cpp ``src/models/gemma4-assistant.cpp``, ``src/llama-model.cpp`` (``create_memory``, the
shared ``llama_kv_cache_iswa``), ``src/llama-kv-cache.cpp`` (a cache with ``other`` writes no cell),
``common/speculative.cpp`` (``common_speculative_impl_draft_mtp``, ``common_speculative_init_result``).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.llama import nextn
from app.engine.llama.backend import BackendError, LoadOptions, Model
from app.engine.drafters.mtp import process_entries
from app.engine.names import DraftKind

ASSISTANT_ARCHS = nextn.ASSISTANT_ARCHS
LABEL = DraftKind.ASSISTANT  # how the app names this kind of draft


class AssistantError(BackendError):
    """An assistant drafter that cannot draft for this target."""

    hint, status, code = "load a Gemma-4 assistant beside the Gemma-4 target it was made for", 400, "invalid_value"


def gguf_arch(path: Path | str) -> Optional[str]:
    """``general.architecture`` of a GGUF file when it is the first key (as every converter writes it), read
    from the header alone; None otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
            if len(head) < 24 or head[:4] != b"GGUF":
                return None
            (n_key,) = struct.unpack("<Q", f.read(8))
            key = f.read(min(n_key, 256))
            (vtype,) = struct.unpack("<I", f.read(4))
            if key != b"general.architecture" or vtype != 8:  # 8: a string
                return None
            (n_val,) = struct.unpack("<Q", f.read(8))
            return f.read(min(n_val, 256)).decode("utf-8", "replace")
    except (OSError, struct.error):
        return None


def is_assistant(path: Path | str) -> bool:
    return gguf_arch(path) in ASSISTANT_ARCHS


def open_draft(path: Path | str, options: LoadOptions, target: Model) -> Model:
    """Load a draft GGUF beside ``target``: an assistant drafter tied to the target's context, else a model."""
    return AssistantModel(path, options, target) if is_assistant(path) else Model(path, options)


class AssistantModel(Model):
    """A Gemma-4 assistant GGUF with a context tied to ``target``'s: drafts from the target's cache and rows."""

    def __init__(self, path: Path | str, options: LoadOptions, target: Model):
        self.target = target
        self._tapped = False  # whether the target keeps its hidden rows for assistants (the last one turns them off)
        self.g_last = np.zeros(0, dtype=np.float32)
        super().__init__(path, options)

    def _load(self, options: LoadOptions) -> None:
        t = self.target
        if t.model is None or t.ctx is None:
            raise AssistantError(f"{self.path.name}: the target runs on other machines (RPC); an assistant "
                                 "drafter reads the target's cache and cannot reach it there")
        if not nextn.BOUND:
            raise AssistantError(f"{self.path.name}: this llama.cpp library does not export the hidden-row "
                                 "functions an assistant drafter needs")
        t_arch = t.meta("general.architecture")
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if options.n_gpu_layers < 0 else options.n_gpu_layers
        mparams.load_mode = L.LLAMA_LOAD_MODE_MMAP if options.mmap else L.LLAMA_LOAD_MODE_NONE
        self._load_model(mparams)
        arch = self.meta("general.architecture")
        why = None
        if t_arch not in ASSISTANT_ARCHS.get(arch, ()):
            why = f"a {arch} assistant drafts only for {', '.join(sorted(ASSISTANT_ARCHS.get(arch, ())))} " \
                  f"targets, not {t_arch}"
        elif int(L.llama_model_n_embd_out(self.model)) != int(L.llama_model_n_embd_out(t.model)):
            why = (f"it reads hidden rows {L.llama_model_n_embd_out(self.model)} wide but the target's are "
                   f"{L.llama_model_n_embd_out(t.model)}: it was made for another size of {t_arch}")
        if why is not None:
            L.llama_model_free(self.model)
            raise AssistantError(f"{self.path.name}: {why}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = t.n_ctx  # (llama.cpp sizes the shared cache view as the target's cache)
        cparams.n_batch = cparams.n_ubatch = options.n_batch
        cparams.n_seq_max = 1
        cparams.n_rs_seq = 0
        cparams.n_threads = cparams.n_threads_batch = self.n_threads = options.n_threads or t.n_threads
        cparams.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = t.ctx
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise AssistantError(f"{self.path.name}: llama.cpp could not tie the assistant to the target's "
                                 f"context ({t.path.name})")
        nextn.set_embeddings_nextn(self.ctx, True, False)  # its own row for the next draft step
        if t.hidden is None:  # the target's rows: for every token from now on (its cache restarts to have them)
            t.hidden = nextn.HiddenRows(t.ctx, int(L.llama_model_n_embd_out(t.model)))
            t.reset()
            t.hidden.assistants = 0
            self._tapped = True
        elif t.hidden.assistants:  # turned on by another assistant (one being swapped for this one)
            self._tapped = True
        if self._tapped:
            t.hidden.assistants += 1
        self.batch = L.llama_batch_ext_init(self.ctx)
        self.n_embd = t.hidden.n_embd
        self.g_last = np.zeros(self.n_embd, dtype=np.float32)

    # --- the drafting protocol (MtpProposer drives it as it drives an MTP head) ------------------------

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Start a draft after ``tokens``: decode ``(tokens[-1], h_{n-2})`` at ``n - 1`` and return a copy of its
        logits. Nothing to catch up on otherwise (the cache is the target's, which must hold ``tokens[:-1]``)."""
        self.cached = list(tokens)
        if not need_logits or not tokens:
            return None
        n = len(tokens)
        if self.target.n_past != n - 1:
            raise BackendError(f"the assistant drafts from the target's cache, which holds {self.target.n_past} "
                               f"tokens where {n - 1} were expected")
        row = self.target.hidden.row(n - 2)[None, :]
        return np.array(process_entries(self, tokens[-1:], [n - 1], row, True), copy=True)

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """Append one drafted token, paired with the assistant's own last row at the draft's position (that of
        the history's last token: where the target's cache ends); its logits as a (1, n_vocab) view."""
        if len(tokens) != 1:
            raise BackendError("the assistant drafts one token at a time")
        out = process_entries(self, tokens, [self.target.n_past], self.g_last[None, :], True)
        self.cached.append(int(tokens[0]))
        return out[None, :]

    def missing(self, tokens: Sequence[int]) -> int:
        """Entries a :meth:`sync` feeds: the history's last token (never a catch-up)."""
        return 1 if tokens else 0

    def rollback(self, n_keep: int) -> None:
        """Forget the drafted tokens past ``n_keep`` (they wrote nothing)."""
        del self.cached[n_keep:]

    def reset(self) -> None:
        """Forget the history. Never clears the memory: its cells are the target's."""
        self.cached.clear()

    def memory_counts(self) -> dict:
        return {}

    def close(self) -> None:
        if self._closed:
            return
        L.llama_batch_ext_free(self.batch)
        rows = self.target.hidden
        if self._tapped and rows is not None:
            rows.assistants -= 1
            if rows.assistants == 0 and not self.target.closed:  # the last one turns them off
                nextn.set_embeddings_nextn(self.target.ctx, False, False)
                self.target.hidden = None
        super().close()
