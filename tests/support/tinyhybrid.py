"""Recipes for made-up hybrid-memory GGUFs (random weights, a few MB) that the real llama.cpp loads.

LFM2: short-convolution (recurrent) blocks and attention blocks in one model, an arch whose recurrent
state llama.cpp can roll back a few tokens (``llm_arch_supports_rs_rollback``). The vocabulary is copied
from a real GGUF (the demo SmolLM2), so the tokenizer and chat template work; the weights are noise, so a
target and a draft written with different seeds disagree often (rejections) and with the same seed agree
always (acceptances). These files only test correctness, never speed or quality.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

_COPIED = ("tokenizer.", "general.name")


def _copy_vocab(w: gguf.GGUFWriter, src: Path) -> int:
    """Copy tokenizer.* keys from ``src`` into ``w``; returns the vocabulary size."""
    r = gguf.GGUFReader(str(src))
    n_vocab = 0
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vt = gguf.GGUFValueType(f.types[0])
        if vt == gguf.GGUFValueType.ARRAY:
            sub = gguf.GGUFValueType(f.types[-1])
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_array(name, val)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(f.parts[f.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], vt)
    return n_vocab


def write_lfm2(path: Path, vocab_from: Path, seed: int = 0, n_embd: int = 64, n_layer: int = 4,
               n_ff: int = 128, n_head: int = 4, n_ctx: int = 2048, scale: float = 0.5) -> Path:
    """An LFM2 model: layers alternate short convolution (even) and attention (odd). The embeddings and the
    (untied) output matrix come from a fixed seed that every model shares, the layers from ``seed``: two
    models with different seeds agree on some tokens and not on others, like a real pair."""
    shared = np.random.default_rng(12345)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch="lfm2")
    w.add_name(f"tiny-lfm2-s{seed}")
    n_vocab = _copy_vocab(w, vocab_from)
    head_kv = [0 if i % 2 == 0 else n_head for i in range(n_layer)]
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_shortconv_l_cache(3)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    def t(name: str, *shape: int, s: float = scale) -> None:  # shape in numpy order (rows, cols)
        w.add_tensor(name, (rng.standard_normal(shape) * s / np.sqrt(shape[-1])).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    w.add_tensor("token_embd.weight", shared.standard_normal((n_vocab, n_embd)).astype(np.float16))
    w.add_tensor("output.weight", shared.standard_normal((n_vocab, n_embd)).astype(np.float16))
    ones("token_embd_norm.weight", n_embd)
    head = n_embd // n_head
    for i in range(n_layer):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", n_embd)
        ones(p + "ffn_norm.weight", n_embd)
        t(p + "ffn_gate.weight", n_ff, n_embd)
        t(p + "ffn_up.weight", n_ff, n_embd)
        t(p + "ffn_down.weight", n_embd, n_ff)
        if head_kv[i] == 0:
            t(p + "shortconv.conv.weight", n_embd, 3, s=1.0)
            t(p + "shortconv.in_proj.weight", 3 * n_embd, n_embd)
            t(p + "shortconv.out_proj.weight", n_embd, n_embd)
        else:
            ones(p + "attn_q_norm.weight", head)
            ones(p + "attn_k_norm.weight", head)
            t(p + "attn_q.weight", n_embd, n_embd)
            t(p + "attn_k.weight", n_embd, n_embd)
            t(p + "attn_v.weight", n_embd, n_embd)
            t(p + "attn_output.weight", n_embd, n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":  # python tests/support/tinyhybrid.py VOCAB.gguf OUT_DIR: the pair the tests use, for bench
    import sys

    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    print(write_lfm2(out / "tiny-lfm2-target.gguf", Path(sys.argv[1]), seed=1))
    print(write_lfm2(out / "tiny-lfm2-draft.gguf", Path(sys.argv[1]), seed=2, n_layer=2))
