"""The target's layer-input rows an EAGLE-3 head or a DFlash block drafter drafts from, the llama.cpp calls that give
them, and the target architectures that record them.

An EAGLE-3 head reads, for every position ``P`` of the target's sequence, the inputs of three of the target's
layers (``eagle3.target_layers`` in its GGUF), concatenated: ``[x^(a)_P | x^(b)_P | x^(c)_P]``, 3·n_embd floats.
llama.cpp outputs them per layer once ``llama_set_embeddings_layer_inp(ctx, layer, true)`` (``src/llama-ext.h``:
C++ linkage, bound by its mangled name as ``nextn.py`` binds the NextN calls) and a decode ran; they are read with
``llama_get_embeddings_layer_inp(ctx, layer)``, one row per token of the last decode, in batch order.

Only some architectures' graphs hand llama.cpp those inputs (``res->t_layer_inp[il] = …`` in ``src/models/*.cpp``,
for every layer of the main graph). On any other, a decode with a layer's input turned on stops the process
(``GGML_ASSERT(t_layer_inp[il] != nullptr)`` in ``llm_graph_result::set_outputs``, ``src/llama-graph.cpp``), so
:data:`LAYER_ROW_ARCHS` is checked before anything is turned on.
"""

from __future__ import annotations

import ctypes
from enum import Enum
from typing import Any, Optional, Sequence

import numpy as np

from app.engine.llama import nextn
from app.engine.llama.nextn import bind  # how nextn.py binds its C++-linkage calls


class HeadKind(str, Enum):
    """The draft GGUF architectures that read a target's layer inputs (their ``general.architecture``)."""

    EAGLE3 = "eagle3"
    DFLASH = "dflash"

    @property
    def reader(self) -> str:
        """How a refusal names a draft of this kind."""
        return "an EAGLE-3 head" if self is HeadKind.EAGLE3 else "a DFlash drafter"


# target layers a head of each kind reads (None: as many as its metadata names, at least one)
LAYER_COUNT = {HeadKind.EAGLE3: 3, HeadKind.DFLASH: None}

# archs whose main graph records every layer's input (src/models/*.cpp, this build), with those that reuse such a
# graph (models.h: hunyuan-dense ← hunyuan_vl, lfm2moe ← lfm2, nemotron_h_moe ← nemotron_h). Left out: qwen4exp,
# whose rows are hc·n_embd wide (llama-context.cpp's extract_layer_inputs asserts n_embd), and every other arch.
LAYER_ROW_ARCHS = frozenset({
    "llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "gpt-oss", "gemma4", "hunyuan_vl",
    "hunyuan-dense", "lfm2", "lfm2moe", "minimax-01", "minimax-m2", "muse-glimmer", "nanbeige", "bailingmoe3",
    "mimo2", "nemotron_h", "nemotron_h_moe", "deepseek4",
})

_F32P = ctypes.POINTER(ctypes.c_float)

# void llama_set_embeddings_layer_inp(llama_context *, uint32_t lid, bool value)
set_layer_inp = bind("_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
                     [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None)
# float * llama_get_embeddings_layer_inp(llama_context *, uint32_t lid)
get_layer_inp = bind("_Z30llama_get_embeddings_layer_inpP13llama_contextj",
                     [ctypes.c_void_p, ctypes.c_uint32], _F32P)
# const int32_t * llama_model_target_layer_ids(const llama_model *)
target_layer_ids = bind("_Z28llama_model_target_layer_idsPK11llama_model",
                        [ctypes.c_void_p], ctypes.POINTER(ctypes.c_int32))
# uint32_t llama_model_target_layer_ids_n(const llama_model *)
target_layer_ids_n = bind("_Z30llama_model_target_layer_ids_nPK11llama_model", [ctypes.c_void_p],
                          ctypes.c_uint32)

BOUND = nextn.BOUND and all(f is not None for f in (set_layer_inp, get_layer_inp, target_layer_ids,
                                                    target_layer_ids_n))


def head_layers(model) -> list[int]:
    """The target layers a loaded EAGLE-3 or DFlash model reads (``<arch>.target_layers``)."""
    n = int(target_layer_ids_n(model))
    ptr = target_layer_ids(model)
    return [int(ptr[i]) for i in range(n)] if n and ptr else []


def arch_refusal(arch: Optional[str], kind: HeadKind = HeadKind.EAGLE3) -> Optional[str]:
    """Why llama.cpp cannot give a target of ``arch`` the rows a head of ``kind`` reads; None if it can (checked
    before any layer input is turned on: on another arch that stops the process)."""
    if arch not in LAYER_ROW_ARCHS:
        return f"llama.cpp does not record the layer inputs of {arch} targets, which {kind.reader} reads"
    return None


def target_refusal(target: Any, kind: HeadKind) -> Optional[str]:
    """Why ``target`` (a loaded ``backend.Model``) cannot feed a head of ``kind`` at all, checked before the head is
    loaded: it runs on other machines, this llama.cpp lacks the layer-row functions, or its arch records no rows."""
    if target.model is None or target.ctx is None:
        return (f"the target runs on other machines (RPC); {kind.reader} reads the target's layer rows and cannot "
                "reach them there")
    if not BOUND:
        return f"this llama.cpp library does not export the layer-row functions {kind.reader} needs"
    return arch_refusal(target.meta("general.architecture"), kind)


def refusal(arch: Optional[str], n_layer: int, n_embd: int, layers: Sequence[int], hidden: int,
            kind: HeadKind = HeadKind.EAGLE3) -> Optional[str]:
    """Why a target of ``arch`` (``n_layer`` layers, ``n_embd`` wide) cannot feed a head of ``kind`` reading the
    inputs of ``layers``, ``hidden`` wide (an EAGLE-3 head's ``eagle3.target_hidden_size``; a DFlash drafter's own
    width, which its ``fc`` takes per layer); None if it can. For ``models check`` as for loading: every figure
    is in the two files' headers."""
    why = arch_refusal(arch, kind)
    if why is not None:
        return why
    want = LAYER_COUNT[kind]
    if want is not None and len(layers) != want:
        return f"{kind.reader} reads {want} target layers, this one {len(layers)}"
    if not layers:
        return f"{kind.reader} names the target layers it reads ({kind.value}.target_layers): this one names none"
    past = [i for i in layers if not 0 <= i < n_layer]
    if past:
        return f"it reads layer {past[0]}, but the target has layers 0-{n_layer - 1}: it was made for another model"
    if hidden != n_embd:
        return f"it reads rows {hidden} wide but the target's are {n_embd}: it was made for another model"
    return None


class LayerRows(nextn.HiddenRows):
    """The concatenated layer-input rows ``[x^(a)_p | x^(b)_p | x^(c)_p]`` of each decoded position ``p`` of one
    context's sequence 0 (rows past a rollback are stale; readers only ask for positions still cached). They
    stand where an MTP head's NextN rows stand (``Model.hidden``), so the target records them on every decode and
    a saved prompt state keeps them."""

    def __init__(self, ctx, layers: Sequence[int], n_embd_layer: int):
        self.ctx, self.layers, self.n_layer_embd = ctx, tuple(layers), n_embd_layer
        self.n_embd = len(self.layers) * n_embd_layer
        self.buf = np.zeros((0, self.n_embd), dtype=np.float32)
        self.heads = 0  # EAGLE-3 heads and DFlash drafters reading these rows (the last to close turns them off)
        for lid in self.layers:
            set_layer_inp(ctx, lid, True)

    def record(self, pos: int, n: int) -> None:
        """Copy the rows of the decode just done (``n`` tokens from position ``pos``)."""
        if pos + n > len(self.buf):
            grown = np.zeros((max(pos + n, 2 * len(self.buf), 256), self.n_embd), dtype=np.float32)
            grown[:len(self.buf)] = self.buf
            self.buf = grown
        w = self.n_layer_embd
        for k, lid in enumerate(self.layers):
            self.buf[pos:pos + n, k * w:(k + 1) * w] = np.ctypeslib.as_array(get_layer_inp(self.ctx, lid),
                                                                             shape=(n, w))

    def row(self, pos: int) -> np.ndarray:
        return self.buf[pos]

    def off(self) -> None:
        """Stop recording (the target's context outputs these layers' inputs no more)."""
        for lid in self.layers:
            set_layer_inp(self.ctx, lid, False)
