"""The target's NextN hidden rows, which an MTP head drafts from, and the llama.cpp calls that give them.

llama.cpp's staging header ``src/llama-ext.h`` declares ``llama_set_embeddings_nextn``,
``llama_get_embeddings_nextn`` and ``llama_set_nextn_layer_offset`` with C++ linkage (no ``extern "C"``), so
llama-cpp-python does not bind them; libllama exports them under their Itanium-mangled names, which are
bound here (``None`` where the library lacks them: MTP is then unavailable, and says so).

A context with NextN output on (unmasked) writes, for every token of every decode, the row ``h_p`` that the
MTP head pairs with the *next* token (``common/speculative.cpp``, ``common_speculative_impl_draft_mtp``).
:class:`HiddenRows` keeps them by position for the cached sequence: 4·n_embd bytes a token.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

import llama_cpp as L
import numpy as np

# archs whose llama.cpp model builds an LLM_GRAPH_TYPE_DECODER_MTP graph (src/models/*.cpp, this build)
MTP_ARCHS = frozenset({
    "qwen35", "qwen35moe", "qwen3next", "glm4moe", "glm-dsa", "glm5-next", "deepseek2", "deepseek32",
    "deepseek4", "mimo2", "step35", "hy_v3", "bailingmoe3", "cohere2moe", "nemotron_h_moe",
})

# archs of a separate drafter GGUF that reads a target's rows and cache -> the target archs it drafts for
# (src/models/gemma4-assistant.cpp, this build; assistant.py)
ASSISTANT_ARCHS = {"gemma4-assistant": frozenset({"gemma4"})}

_F32P = ctypes.POINTER(ctypes.c_float)


def bind(mangled: str, argtypes: list, restype) -> Optional[Any]:
    """A libllama function of C++ linkage by its mangled name, typed; None where the library lacks it."""
    try:
        fn = getattr(L.llama_cpp._lib, mangled)
    except AttributeError:
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return fn


# void llama_set_embeddings_nextn(llama_context *, bool value, bool masked)
set_embeddings_nextn = bind("_Z26llama_set_embeddings_nextnP13llama_contextbb",
                             [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None)
# float * llama_get_embeddings_nextn(llama_context *)
get_embeddings_nextn = bind("_Z26llama_get_embeddings_nextnP13llama_context", [ctypes.c_void_p], _F32P)
# float * llama_get_embeddings_nextn_ith(llama_context *, int32_t i)
get_embeddings_nextn_ith = bind("_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
                                 [ctypes.c_void_p, ctypes.c_int32], _F32P)
# void llama_set_nextn_layer_offset(llama_context *, int32_t offset)
set_nextn_layer_offset = bind("_Z28llama_set_nextn_layer_offsetP13llama_contexti",
                               [ctypes.c_void_p, ctypes.c_int32], None)

BOUND = all(f is not None for f in (set_embeddings_nextn, get_embeddings_nextn, get_embeddings_nextn_ith))


def n_heads(model) -> int:
    """MTP (NextN) layers in a loaded llama model (0: none, or loaded without them)."""
    return int(L.llama_model_n_layer_nextn(model))


def mtp_unavailable(arch: Optional[str], n_nextn: int) -> Optional[str]:
    """Why a model of ``arch`` with ``n_nextn`` NextN layers cannot draft for itself, or None if it can."""
    if n_nextn <= 0:
        return "the model has no MTP (NextN) layers"
    if arch not in MTP_ARCHS:
        return f"llama.cpp builds no MTP graph for the {arch} architecture"
    if not BOUND:
        return "this llama.cpp library does not export the NextN embedding functions"
    return None


class HiddenRows:
    """``h_p`` for each decoded position ``p`` of one context's sequence 0 (rows past a rollback are stale;
    readers only ask for positions still cached)."""

    assistants = 0  # assistant drafters (assistant.py) reading these rows, where they turned them on

    def __init__(self, ctx, n_embd: int):
        self.ctx, self.n_embd = ctx, n_embd
        self.buf = np.zeros((0, n_embd), dtype=np.float32)
        set_embeddings_nextn(ctx, True, False)  # unmasked: a row for every token, not only those with logits

    def record(self, pos: int, n: int) -> None:
        """Copy the rows of the decode just done (``n`` tokens from position ``pos``)."""
        self._room(pos + n)
        ptr = get_embeddings_nextn(self.ctx)
        self.buf[pos:pos + n] = np.ctypeslib.as_array(ptr, shape=(n, self.n_embd))

    def restore(self, rows: np.ndarray) -> None:
        """The rows of a sequence put back whole (a saved prompt state, ``promptcache.py``)."""
        self._room(len(rows))
        self.buf[:len(rows)] = rows

    def keep_path(self, base: int, nodes: list[int]) -> None:
        """After a tree pass recorded its rows by batch index from ``base`` (``treekv.py``): the rows of batch
        indices ``nodes`` (the kept path, the root first) at positions ``base`` onward; the rest are stale."""
        self.buf[base:base + len(nodes)] = self.buf[[base + v for v in nodes]]  # (a fancy index copies first)

    def _room(self, n: int) -> None:
        if n > len(self.buf):
            grown = np.zeros((max(n, 2 * len(self.buf), 256), self.n_embd), dtype=np.float32)
            grown[:len(self.buf)] = self.buf
            self.buf = grown

    def row(self, pos: int) -> np.ndarray:
        """``h_pos``; position -1 (before the first token) is zeros, as llama.cpp's driver starts."""
        return self.buf[pos] if pos >= 0 else np.zeros(self.n_embd, dtype=np.float32)


def tap(model, ctx, arch: Optional[str], load_mtp: bool) -> Optional[HiddenRows]:
    """Rows for an MTP head, where the loaded model has one this llama.cpp can run; else None."""
    if not load_mtp or mtp_unavailable(arch, n_heads(model)) is not None:
        return None
    return HiddenRows(ctx, int(L.llama_model_n_embd_out(model)))
