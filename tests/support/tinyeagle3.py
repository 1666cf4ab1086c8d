"""Recipes for a made-up Llama target and a made-up EAGLE-3 head (``eagle3``) for it: random weights, a few MB
each, loaded by the real llama.cpp (``src/models/llama.cpp``, ``src/models/eagle3.cpp``).

The head reads the inputs of three of the target's layers (``eagle3.target_layers``) at position ``P``, fuses
them with its ``fc`` (the encoder, run as ``LLAMA_PROCESS_TYPE_ENCODE``) into ``g_P``, and its one decoder
layer takes ``(x_{P+1}, g_P)`` at position ``P`` and predicts ``x_{P+2}``. It has no token embeddings and no
output matrix of its own unless ``own_vocab``: it borrows the target's through ``ctx_other``. The weights are
shaped so that the result is testable:

- the target's blocks are noise scaled by ``trunk``: at 0 every block adds nothing, so the target is a bigram
  model (its logits after ``x`` are ``W_out · rmsnorm(e(x))``) and every layer's input row is ``e(x_P)``;
- the copy head (``noise`` 0) predicts exactly what a bigram target will, see :func:`write_eagle3`;
- the noisy head (``noise`` above 0) is the copy head with noise on every weight and ``g`` let in: it agrees
  with a noisy target now and then (rejections and acceptances), and since its prediction depends on ``g_P``, its
  own cache and the positions, a wrong pairing of tokens, rows or positions changes its drafts.

The vocabulary is copied from a real GGUF (the demo SmolLM2). These files test correctness only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

from support.tinyhybrid import _copy_vocab

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF = 64, 4, 4, 2, 128
LAYERS = (0, 2, 3)  # the target layers whose inputs the head reads (llama.cpp's converter: 2, n/2, n - 3)
COPY_GAIN = 4.0  # the copy head's query and key scale: a token attends to its own kind only (see write_eagle3)


def _shared(n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The target's token embeddings and output matrix (a fixed seed: every file here shares them)."""
    rng = np.random.default_rng(12345)
    return rng.standard_normal((n_vocab, N_EMBD)), rng.standard_normal((n_vocab, N_EMBD))


def _finish(w: gguf.GGUFWriter, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _makers(w: gguf.GGUFWriter, rng: np.random.Generator):
    def t(name: str, *shape: int, s: float) -> None:  # shape in numpy order (rows = outputs, cols = inputs)
        w.add_tensor(name, (rng.standard_normal(shape) * s / np.sqrt(shape[-1])).astype(np.float32))

    def fill(name: str, n: int, value: float = 1.0) -> None:
        w.add_tensor(name, np.full(n, value, dtype=np.float32))

    return t, fill


def write_llama(path: Path, vocab_from: Path, seed: int = 0, trunk: float = 0.3, n_ctx: int = 2048) -> Path:
    """A Llama target of ``N_LAYER`` blocks, ``N_EMBD`` wide, its blocks' outputs scaled by ``trunk``."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(f"tiny-llama-s{seed}")
    n_vocab = _copy_vocab(w, vocab_from)
    head_dim = N_EMBD // N_HEAD
    w.add_context_length(n_ctx)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    t, fill = _makers(w, rng)
    embd, out = _shared(n_vocab)
    w.add_tensor("token_embd.weight", embd.astype(np.float16))
    w.add_tensor("output.weight", out.astype(np.float16))
    fill("output_norm.weight", N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        fill(p + "attn_norm.weight", N_EMBD)
        t(p + "attn_q.weight", N_HEAD * head_dim, N_EMBD, s=1.0)
        t(p + "attn_k.weight", N_HEAD_KV * head_dim, N_EMBD, s=1.0)
        t(p + "attn_v.weight", N_HEAD_KV * head_dim, N_EMBD, s=1.0)
        t(p + "attn_output.weight", N_EMBD, N_HEAD * head_dim, s=trunk)
        fill(p + "ffn_norm.weight", N_EMBD)
        t(p + "ffn_gate.weight", N_FF, N_EMBD, s=1.0)
        t(p + "ffn_up.weight", N_FF, N_EMBD, s=1.0)
        t(p + "ffn_down.weight", N_EMBD, N_FF, s=trunk)
    return _finish(w, path)


def write_eagle3(path: Path, vocab_from: Path, seed: int = 0, noise: float = 0.3, own_vocab: bool = False,
                 layers: Sequence[int] = LAYERS, target_hidden: int = N_EMBD, n_ctx: int = 2048) -> Path:
    """An EAGLE-3 head for :func:`write_llama`'s targets: ``N_EMBD`` wide, one decoder layer, reading the inputs of
    the target's ``layers`` (``target_hidden`` wide each).

    At ``noise`` 0 (the copy head) it ignores ``g`` and the position and predicts from the current token alone,
    as a bigram target does: ``attn_norm_2`` is zero (so ``g`` is normed to zero) and ``norm_before_residual`` is
    on (the residual is that zero, not the raw ``g``); one attention head whose query and key are ``COPY_GAIN``
    times the normed token embedding on the dimensions RoPE leaves alone (``rope.dimension_count`` 2, dimensions
    0-1 zeroed), so a token attends only to the entries of the same token, whose values (the normed embedding
    itself) are all equal: the attention returns ``rmsnorm(e(x))`` exactly. Its FFN adds nothing (``ffn_down``
    zero), so the head's output row is ``rmsnorm(e(x))`` and its logits ``W_out · rmsnorm(rmsnorm(e(x)))``: the
    bigram target's (up to float rounding), with the target's embeddings and output matrix borrowed through
    ``ctx_other`` (or copies of them with ``own_vocab``).

    ``noise`` above 0 adds that much noise to every one of those weights and lets ``g`` in (``attn_norm_2`` =
    ``noise``): the head then depends on the target's rows, its cache and the positions, and agrees with a noisy
    target now and then."""
    rng = np.random.default_rng(seed)
    arch = "eagle3"
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name(f"tiny-eagle3-s{seed}-n{noise}")
    n_vocab = _copy_vocab(w, vocab_from)
    w.add_context_length(n_ctx)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_array(f"{arch}.target_layers", [int(i) for i in layers])
    w.add_uint32(f"{arch}.target_hidden_size", target_hidden)
    w.add_bool(f"{arch}.norm_before_residual", True)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    t, fill = _makers(w, rng)
    if own_vocab:
        embd, out = _shared(n_vocab)
        w.add_tensor("token_embd.weight", embd.astype(np.float16))
        w.add_tensor("output.weight", out.astype(np.float16))
    fill("output_norm.weight", N_EMBD)
    t("fc.weight", N_EMBD, len(layers) * target_hidden, s=1.0)
    p = "blk.0."
    fill(p + "attn_norm.weight", N_EMBD)
    fill(p + "attn_norm_2.weight", N_EMBD, noise)
    fill(p + "ffn_norm.weight", N_EMBD)
    t(p + "ffn_gate.weight", N_FF, N_EMBD, s=1.0)
    t(p + "ffn_up.weight", N_FF, N_EMBD, s=1.0)

    def noisy(base: np.ndarray) -> np.ndarray:
        return (base + noise * rng.standard_normal(base.shape) / np.sqrt(base.shape[1])).astype(np.float32)

    qk = np.zeros((N_EMBD, 2 * N_EMBD))  # out = W @ [embd_norm | g_norm]
    qk[2:N_EMBD, 2:N_EMBD] = COPY_GAIN * np.eye(N_EMBD - 2)  # the dimensions RoPE leaves alone
    v = np.zeros((N_EMBD, 2 * N_EMBD))
    v[:, :N_EMBD] = np.eye(N_EMBD)
    w.add_tensor(p + "attn_q.weight", noisy(qk))
    w.add_tensor(p + "attn_k.weight", noisy(qk))
    w.add_tensor(p + "attn_v.weight", noisy(v))
    w.add_tensor(p + "attn_output.weight", noisy(np.eye(N_EMBD)))
    w.add_tensor(p + "ffn_down.weight", noisy(np.zeros((N_EMBD, N_FF))))
    return _finish(w, path)


if __name__ == "__main__":  # python tests/support/tinyeagle3.py VOCAB.gguf OUT_DIR: the pair the tests use, for bench
    import sys

    out_dir = Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    print(write_llama(out_dir / "tiny-llama.gguf", Path(sys.argv[1]), seed=1))
    print(write_eagle3(out_dir / "tiny-eagle3.gguf", Path(sys.argv[1]), seed=1))
