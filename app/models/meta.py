"""Model metadata and the engine's vocabulary facts, computed from a GGUF header alone (no model is loaded).

:func:`vocab_info` reproduces how llama.cpp (``llama_vocab::impl::load`` in src/llama-vocab.cpp) fills the
fields that :func:`app.engine.llama.vocab.check` compares: the vocabulary type from ``tokenizer.ggml.model``, the
per-tokenizer default BOS/EOS ids (disabled when out of range, replaced by the GGUF keys when those are in
range), the per-tokenizer default add-BOS/add-EOS flags (BPE pre-tokenizers such as ``llama3`` turn add-BOS on),
overridden by ``tokenizer.ggml.add_bos_token`` / ``add_eos_token`` when present.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
from gguf import GGMLQuantizationType, LlamaFileType

from app.engine.llama.vocab import GGUF_TOKENIZER_MODELS, VocabInfo
from app.models import ggufheader
from app.models.ggufheader import GGUFError, Header

NULL = -1
MAX_LAYERS = 1 << 16  # far above any model; a larger block_count is a corrupt header
# tokenizer.ggml.model -> vocab type, for the names llama.cpp accepts beyond the engine's table.
TOKENIZER_MODELS = {**GGUF_TOKENIZER_MODELS, "hybriddna": "bpe", "whitespace": "bpe", "gemma4": "bpe",
                    "test": "test"}
# Default (bos, eos) ids per tokenizer.ggml.model, before the GGUF keys are read.
DEFAULT_IDS = {"llama": (1, 2), "bert": (101, NULL), "gpt2": (11, 11), "hybriddna": (11, 11),
               "whitespace": (11, 11), "t5": (NULL, 1), "rwkv": (NULL, NULL), "test": (NULL, NULL),
               "plamo2": (1, 2), "gemma4": (NULL, NULL), "no_vocab": (NULL, NULL), "none": (NULL, NULL)}
# Default (add_bos, add_eos) per vocabulary type.
DEFAULT_ADD = {"spm": (True, False), "wpm": (True, False), "ugm": (False, True), "rwkv": (False, False)}
BPE_PRE_ADD_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                   "jina-v5-nano", "tekken", "chameleon"}
BPE_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}


def vocab_info(header: Header) -> VocabInfo:
    """The :class:`VocabInfo` llama.cpp would build when loading this file."""
    model = header.text("tokenizer.ggml.model")
    if model is None:
        raise GGUFError("no tokenizer in this GGUF (tokenizer.ggml.model is missing)")
    if model not in TOKENIZER_MODELS:
        raise GGUFError(f"unknown tokenizer {model!r}: llama.cpp cannot load this file")
    vtype = TOKENIZER_MODELS[model]
    if vtype == "none":
        arch = header.text("general.architecture", "")
        n = header.integer(f"{arch}.vocab_size", 0)
        if not 0 <= n <= 1 << 24:
            raise GGUFError(f"metadata field {arch}.vocab_size is {n}: a corrupt header")
        return VocabInfo("none", n, NULL, NULL, False, False, [""] * n)
    tokens = list(header.strings("tokenizer.ggml.tokens"))
    n = len(tokens)
    bos, eos = DEFAULT_IDS.get(model, (NULL, NULL))
    add_bos, add_eos = DEFAULT_ADD.get(vtype, (False, False))
    pre = header.text("tokenizer.ggml.pre", "")
    if vtype == "bpe" and model != "gemma4":
        if pre in BPE_PRE_ADD_BOS:
            add_bos = True
        if pre in BPE_PRE_NO_BOS:
            bos = NULL
    bos = _special(header, "tokenizer.ggml.bos_token_id", bos, n)
    eos = _special(header, "tokenizer.ggml.eos_token_id", eos, n)
    add_bos = header.flag("tokenizer.ggml.add_bos_token", add_bos)
    add_eos = header.flag("tokenizer.ggml.add_eos_token", add_eos)
    if model == "gemma4":  # llama.cpp forces add-BOS on for the Gemma 4 pre-tokenizer
        add_bos = True
    return VocabInfo(vtype, n, bos, eos, add_bos, add_eos, tokens)


def _special(header: Header, key: str, default: int, n_tokens: int) -> int:
    if default >= 0 and default >= n_tokens:
        default = NULL
    value = header.integer(key)
    if value is None:
        return default
    return value if 0 <= value < n_tokens else default


@dataclass(frozen=True)
class ModelMeta:
    """What the library shows and what the fit estimate needs, from the header and the file size."""

    architecture: str
    name: str
    params: int
    quant: str
    context_length: int
    n_vocab: int
    vocab_fingerprint: str
    vocab_type: str
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    sliding_window: int  # 0 when every layer attends to the whole context
    swa_layers: int  # layers using the sliding window (the rest are global)
    file_size: int
    weights_bytes: int  # tensor data
    nextn_layers: int = 0  # MTP (NextN) blocks after the trunk (block_count includes them)
    attn_layers: int = -1  # layers with a KV cache of their own (-1: all; see ``_memory_layout``)
    state_floats: int = 0  # recurrent state of one sequence, all recurrent layers (F32 values)
    target_layers: tuple = ()  # a head's (EAGLE-3, DFlash): the target layers whose inputs it reads
    target_hidden: int = 0  # a head's: the width of each of those rows, where its GGUF says (EAGLE-3)
    block_size: Optional[int] = None  # a block drafter's (DFlash): ``<arch>.block_size``, None where unnamed
    mask_token: Optional[int] = None  # ``tokenizer.ggml.mask_token_id`` (a block drafter fills its block with it)
    selector_rank: int = 0  # a DFlash2 drafter's ``<arch>.selector_rank``
    markov: bool = False  # it holds a Markov head (``markov_w1.weight``: a DSpark drafter)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def params_label(self) -> str:
        p = self.params
        return f"{p / 1e9:.1f}B" if p >= 1e9 else f"{p / 1e6:.0f}M"


def model_meta(header: Header, file_size: int, vocab: Optional[VocabInfo] = None) -> ModelMeta:
    kv = header.kv
    arch = header.text("general.architecture", "unknown")

    def num(key: str, default: int = 0) -> int:
        value = header.integers(f"{arch}.{key}", default)  # per-layer arrays: the largest
        if value < 0 or value >= 1 << 40:
            raise GGUFError(f"metadata field {arch}.{key} is {value}: a corrupt header")
        return value or default

    vocab = vocab or vocab_info(header)
    n_embd, n_head = num("embedding_length"), num("attention.head_count")
    n_head_kv = num("attention.head_count_kv", n_head)
    head_k = num("attention.key_length", n_embd // n_head if n_head else 0)
    head_v = num("attention.value_length", head_k)
    n_layers = num("block_count")
    if n_layers > MAX_LAYERS:
        raise GGUFError(f"metadata field {arch}.block_count is {n_layers}: a corrupt header")
    window = num("attention.sliding_window")
    swa = _swa_layers(arch, kv, n_layers) if window else 0
    attn, state = _memory_layout(arch, kv, n_layers, num)
    return ModelMeta(
        architecture=arch, name=_display_name(kv.get("general.name")),
        params=sum(t.n_elements for t in header.tensors), quant=quant_name(header),
        context_length=num("context_length"), n_vocab=vocab.n_vocab, vocab_fingerprint=vocab.fingerprint(),
        vocab_type=vocab.vocab_type, n_layers=n_layers, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim_k=head_k, head_dim_v=head_v, sliding_window=window, swa_layers=swa, file_size=file_size,
        weights_bytes=sum(t.n_bytes for t in header.tensors), nextn_layers=num("nextn_predict_layers"),
        attn_layers=attn, state_floats=state, target_layers=_target_layers(header, arch),
        target_hidden=num("target_hidden_size"), block_size=header.integer(f"{arch}.block_size"),
        mask_token=header.integer("tokenizer.ggml.mask_token_id"), selector_rank=num("selector_rank"),
        markov=any(t.name == "markov_w1.weight" for t in header.tensors),  # (drafters/dflash.py's DSPARK_TENSOR)
    )


def _target_layers(header: Header, arch: str) -> tuple:
    """``{arch}.target_layers``: the target layers a head reads (llama.cpp's LLM_KV_TARGET_LAYERS), () if none."""
    key = f"{arch}.target_layers"
    value = header.kv.get(key)
    if value is None:
        return ()
    if not (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.size <= MAX_LAYERS):
        raise GGUFError(f"metadata field {key} is {ggufheader.describe(value)}, not layer ids: a corrupt header")
    return tuple(int(v) for v in value)


def _memory_layout(arch: str, kv: dict, n_layers: int, num) -> tuple[int, int]:
    """(layers with a KV cache of their own, or -1 for all; recurrent state floats of one sequence) as llama.cpp
    lays them out (``llama_hparams::n_embd_r/n_embd_s``): Qwen3.5/3.6 and Qwen3-Next keep attention in every
    ``full_attention_interval``-th trunk layer and a gated delta-net elsewhere, LFM2 attention where
    ``head_count_kv`` is not 0 and short convolutions elsewhere; a Gemma-4 assistant reads the target's cache."""
    if arch in ("qwen35", "qwen35moe", "qwen3next"):
        trunk = n_layers - num("nextn_predict_layers")
        attn = trunk // max(1, num("full_attention_interval", 4))
        d_inner, d_state, n_group = num("ssm.inner_size"), num("ssm.state_size"), num("ssm.group_count")
        per_layer = (num("ssm.conv_kernel", 4) - 1) * (d_inner + 2 * n_group * d_state) + d_state * d_inner
        return attn, (trunk - attn) * per_layer
    if arch in ("lfm2", "lfm2moe"):
        heads = kv.get(f"{arch}.attention.head_count_kv")
        if isinstance(heads, (list, np.ndarray)) and len(heads) == n_layers:
            attn = int(sum(1 for h in heads if int(h) > 0))
            return attn, (n_layers - attn) * num("embedding_length") * (num("shortconv.l_cache", 3) - 1)
    if arch in ("gemma4-assistant",):
        return 0, 0
    return -1, 0


def _display_name(value: Any) -> str:
    """``general.name`` is only shown: a number is shown as one, anything else (an array) as nothing."""
    return str(value)[:200] if isinstance(value, (str, int, float)) else ""


def _swa_layers(arch: str, kv: dict, n_layers: int) -> int:
    """Layers with a sliding window: an explicit per-layer pattern, else llama.cpp's pattern for the arch
    (Gemma 2: every other layer; Gemma 3: five of every six)."""
    pattern = kv.get(f"{arch}.attention.sliding_window_pattern")
    if pattern is not None and isinstance(pattern, (list, np.ndarray)):
        return int(sum(bool(p) for p in pattern))
    period = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4}.get(arch)
    if period is None:
        return 0
    return sum(1 for i in range(n_layers) if (i + 1) % period != 0)


def quant_name(header: Header) -> str:
    """The file's quantization: ``general.file_type`` named as llama.cpp names it, else the commonest type."""
    ftype = header.get("general.file_type")
    if isinstance(ftype, (int, np.integer)) and not isinstance(ftype, bool):
        try:
            return LlamaFileType(int(ftype)).name.replace("MOSTLY_", "").replace("ALL_", "")
        except ValueError:
            pass
    kinds = Counter(t.ggml_type for t in header.tensors if len(t.shape) >= 2)
    if not kinds:
        return "unknown"
    try:
        return GGMLQuantizationType(kinds.most_common(1)[0][0]).name
    except ValueError:
        return "unknown"


_cache: dict[tuple[str, int, int], tuple[ModelMeta, VocabInfo]] = {}
_lock = threading.Lock()


def read(path: Path | str) -> tuple[ModelMeta, VocabInfo]:
    """Metadata and vocabulary of a local GGUF file (cached per path, size and mtime), after checking that
    the file is whole (``ggufheader.check_layout``): a truncated or corrupted file raises GGUFError."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from None
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _cache:
            return _cache[key]
    try:
        header = ggufheader.read_file(path)
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        ggufheader.check_layout(header, st.st_size)
    except GGUFError as exc:
        raise GGUFError(f"{path.name}: {exc}") from None
    try:
        vocab = vocab_info(header)
        result = (model_meta(header, st.st_size, vocab), vocab)
    except GGUFError as exc:
        raise GGUFError(f"{path.name}: {exc}") from None
    with _lock:
        if len(_cache) > 32:
            _cache.clear()
        _cache[key] = result
    return result
