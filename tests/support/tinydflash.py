"""Recipes for a made-up Llama target and made-up DFlash / DSpark drafters (``dflash``) for it: random weights, a few
MB each, loaded by the real llama.cpp (``src/models/llama.cpp``, ``src/models/dflash.cpp``).

The drafter writes the target's layer-input rows at every position into its cache through ``fc``, then decodes a
block ``[x_last, MASK, MASK, …]`` with non-causal attention. It has no token embeddings and no output matrix of its
own: it borrows the target's through ``ctx_other``. The weights are shaped so that the result is testable:

- the target's token embeddings carry a flag on dimension ``FLAG``: ``+ALPHA`` for every token, negative for the
  mask token (whose embedding is that flag alone), and its output matrix reads nothing on that dimension, so the
  flag changes no logit;
- the target's blocks are noise scaled by ``trunk``: at 0 it is a bigram model (its logits after ``x`` are
  ``W_out · rmsnorm(e(x))``);
- the copy drafter (``noise`` 0) attends by the flag alone: its query and key read dimension ``FLAG`` only (the
  target's features are fused to zero, so their keys are zero), so a slot attends to the block's slots of one
  sign, see :func:`write_dflash`. DFlash (``dspark`` False) at block 2 drafts one token, the bigram's; DSpark adds
  a Markov head equal to the bigram (``markov_w1`` = the normed embeddings, ``markov_w2`` = the output matrix) and
  drafts the whole greedy chain of a block;
- the noisy drafter (``noise`` above 0) is the copy drafter with noise on every weight and the features let in: it
  agrees with a noisy target now and then, and depends on the target's rows, positions and the block.

The vocabulary is copied from a real GGUF (the demo SmolLM2); the mask token is its last. These files test
correctness only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import gguf
import numpy as np

from support.tinyeagle3 import _finish, _makers
from support.tinyhybrid import _copy_vocab

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF = 64, 4, 4, 2, 128
LAYERS = (0, 1, 3)  # the target layers whose inputs the drafter reads
FLAG, ALPHA = 2, 3.0  # the embeddings' flag dimension (RoPE turns dimensions 0-1 only) and its value
GAIN = 3.0  # the copy drafter's query and key norm weights: a slot attends to its own sign by 8 · GAIN² logits


def _embeddings(n_vocab: int, mask: int) -> tuple[np.ndarray, np.ndarray]:
    """The target's token embeddings and output matrix, flagged (a fixed seed: every file here shares them)."""
    rng = np.random.default_rng(23456)
    embd, out = rng.standard_normal((n_vocab, N_EMBD)), rng.standard_normal((n_vocab, N_EMBD))
    embd[:, FLAG] = ALPHA
    embd[mask] = 0.0
    embd[mask, FLAG] = -1.0
    out[:, FLAG] = 0.0
    out[mask] = 0.0  # never the target's choice
    return embd.astype(np.float32), out.astype(np.float32)


def _rmsnorm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + 1e-6)


def write_target(path: Path, vocab_from: Path, seed: int = 0, trunk: float = 0.1, n_ctx: int = 2048) -> Path:
    """A Llama target of ``N_LAYER`` blocks, ``N_EMBD`` wide, its blocks' outputs scaled by ``trunk``."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(f"tiny-llama-flag-s{seed}")
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
    embd, out = _embeddings(n_vocab, n_vocab - 1)
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output.weight", out)
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


def write_dflash(path: Path, vocab_from: Path, seed: int = 0, noise: float = 0.2, block: Optional[int] = 4,
                 dspark: bool = False, layers: Sequence[int] = LAYERS, n_embd: int = N_EMBD, mask: bool = True,
                 selector_rank: int = 0, n_ctx: int = 2048) -> Path:
    """A DFlash drafter (DSpark with ``dspark``) for :func:`write_target`'s targets: ``n_embd`` wide, one layer of
    one attention head, reading the inputs of the target's ``layers``; ``block``: its ``dflash.block_size`` (None:
    unnamed); ``mask``: whether it names its mask token; ``selector_rank``: a DFlash2 drafter's metadata key.

    At ``noise`` 0 (the copy drafter) ``fc`` is zero, so the target's features are fused to zero and their keys and
    values are zero; the query and key read the flag dimension only and are normed to ``±8 · GAIN`` there, so a slot
    of one sign of flag attends (by ``8 · GAIN²`` logits) to the block's slots of the same sign (DSpark: a token to
    the anchor, the mask slots to each other) or of the other (DFlash: a mask slot to the anchor). The value is the
    normed embedding, the output projection the identity and the FFN adds nothing; so a slot that attends to the
    anchor ``x`` outputs ``rmsnorm(e(x))`` plus its own embedding, whose logits through the target's output matrix
    are the bigram's after ``x`` (the flag is read by no logit), and a mask slot attending to mask slots outputs
    the flag alone: logits zero. DSpark's Markov head adds the bigram's logits after the slot before (``markov_w1``
    the normed embeddings, ``markov_w2`` the output matrix), along llama.cpp's greedy chain.

    ``noise`` above 0 adds that much noise to every one of those weights and a random ``fc``."""
    rng = np.random.default_rng(seed)
    arch = "dflash"
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name(f"tiny-{'dspark' if dspark else 'dflash'}-s{seed}-n{noise}")
    n_vocab = _copy_vocab(w, vocab_from)
    if mask:
        w.add_uint32("tokenizer.ggml.mask_token_id", n_vocab - 1)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_array(f"{arch}.target_layers", [int(i) for i in layers])
    if block is not None:
        w.add_uint32(f"{arch}.block_size", block)
    if selector_rank:
        w.add_uint32(f"{arch}.selector_rank", selector_rank)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    t, fill = _makers(w, rng)

    def noisy(base: np.ndarray) -> np.ndarray:
        return (base + noise * rng.standard_normal(base.shape) / np.sqrt(base.shape[1])).astype(np.float32)

    w.add_tensor("fc.weight", noisy(np.zeros((n_embd, len(layers) * n_embd))))
    fill("enc.output_norm.weight", n_embd)
    fill("output_norm.weight", n_embd)
    p = "blk.0."
    fill(p + "attn_norm.weight", n_embd)
    fill(p + "ffn_norm.weight", n_embd)
    fill(p + "attn_q_norm.weight", n_embd, GAIN)
    fill(p + "attn_k_norm.weight", n_embd, GAIN)
    t(p + "ffn_gate.weight", N_FF, n_embd, s=1.0)
    t(p + "ffn_up.weight", N_FF, n_embd, s=1.0)
    flag = np.zeros((n_embd, n_embd))
    flag[FLAG, FLAG] = 1.0
    w.add_tensor(p + "attn_q.weight", noisy(flag if dspark else -flag))
    w.add_tensor(p + "attn_k.weight", noisy(flag))
    w.add_tensor(p + "attn_v.weight", noisy(np.eye(n_embd)))
    w.add_tensor(p + "attn_output.weight", noisy(np.eye(n_embd)))
    w.add_tensor(p + "ffn_down.weight", noisy(np.zeros((n_embd, N_FF))))
    if dspark:
        embd, out = _embeddings(n_vocab, n_vocab - 1)
        w.add_tensor("markov_w1.weight", noisy(_rmsnorm(embd)))
        w.add_tensor("markov_w2.weight", noisy(out))
    return _finish(w, path)


if __name__ == "__main__":  # python tests/support/tinydflash.py VOCAB.gguf OUT_DIR: files the tests use, for bench
    import sys

    out_dir = Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    print(write_target(out_dir / "tiny-flag-llama.gguf", Path(sys.argv[1]), seed=1))
    print(write_dflash(out_dir / "tiny-dflash.gguf", Path(sys.argv[1]), seed=1))
    print(write_dflash(out_dir / "tiny-dspark.gguf", Path(sys.argv[1]), seed=1, dspark=True))
