"""Recipes for a made-up Gemma-4 target and a made-up Gemma-4 assistant drafter (``gemma4-assistant``): random
weights, a few MB each, loaded by the real llama.cpp (``src/models/gemma4.cpp``, ``gemma4-assistant.cpp``).

The assistant has no KV cache of its own: its layers read the target's last two layers' K/V (a sliding-window
layer reads the target's last sliding-window layer, a full layer the target's last layer), its input is the
target's embedding of the token ``x_p`` and the target's final hidden row ``h_{p-1}``, and it writes a row of
its own for its next step. The weights are shaped so that the result is testable:

- the target's embeddings and output matrix live in the first ``n_embd_a`` dimensions only, so a narrower
  assistant can see all of them;
- the target's blocks are noise scaled by ``trunk``: at 0 the target is a bigram model (its next token depends
  on the current token only), larger values mix in the context (through its sliding-window and full layers);
- the assistant's ``pre_projection`` copies those dimensions of ``x_p`` through, plus ``mix`` times noise of
  ``h_{p-1}``; its attention (on the target's cache) and FFN outputs are scaled by ``head``, and its tied
  output matrix is the target's. With ``trunk = head = mix = 0`` it predicts exactly what the target will (every
  draft accepted); with noise it disagrees now and then (rejections), and a wrong pairing of tokens, rows or
  cache entries changes its drafts.

The vocabulary is copied from a real GGUF (the demo SmolLM2). These files test correctness only.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from support.tinyhybrid import _copy_vocab

N_EMBD, N_EMBD_A, HEAD_DIM, N_HEAD, N_HEAD_KV, N_SWA = 64, 32, 16, 2, 1, 24


def _common(w: gguf.GGUFWriter, arch: str, n_ctx: int, swa: list[bool], n_ff: int) -> None:
    w.add_context_length(n_ctx)
    w.add_block_count(len(swa))
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_uint32(f"{arch}.attention.key_length_swa", HEAD_DIM)
    w.add_uint32(f"{arch}.attention.value_length_swa", HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_uint32(f"{arch}.rope.dimension_count_swa", HEAD_DIM)
    w.add_rope_freq_base(1000000.0)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(N_SWA)
    w.add_array(f"{arch}.attention.sliding_window_pattern", swa)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def _shared(n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The target's token embeddings and output matrix (only the first N_EMBD_A columns are not zero)."""
    rng = np.random.default_rng(12345)
    embd = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    out = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    embd[:, :N_EMBD_A] = rng.standard_normal((n_vocab, N_EMBD_A))
    out[:, :N_EMBD_A] = rng.standard_normal((n_vocab, N_EMBD_A))
    return embd, out


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _block(w: gguf.GGUFWriter, t, ones, p: str, width: int, n_ff: int, s: float, kv: bool) -> None:
    """One Gemma-4 block of ``width``: attention (with its own K/V when ``kv``) and a gated FFN."""
    ones(p + "attn_norm.weight", width)
    t(p + "attn_q.weight", N_HEAD * HEAD_DIM, width, s=1.0)
    if kv:
        t(p + "attn_k.weight", N_HEAD_KV * HEAD_DIM, width, s=1.0)
        t(p + "attn_v.weight", N_HEAD_KV * HEAD_DIM, width, s=1.0)
        ones(p + "attn_k_norm.weight", HEAD_DIM)
    ones(p + "attn_q_norm.weight", HEAD_DIM)
    t(p + "attn_output.weight", width, N_HEAD * HEAD_DIM, s=s)
    ones(p + "post_attention_norm.weight", width)
    ones(p + "ffn_norm.weight", width)
    t(p + "ffn_gate.weight", n_ff, width, s=1.0)
    t(p + "ffn_up.weight", n_ff, width, s=1.0)
    t(p + "ffn_down.weight", width, n_ff, s=s)
    ones(p + "post_ffw_norm.weight", width)
    w.add_tensor(p + "layer_output_scale.weight", np.ones(1, dtype=np.float32))


def _makers(w: gguf.GGUFWriter, rng: np.random.Generator):
    def t(name: str, *shape: int, s: float) -> None:  # shape in numpy order (rows, cols)
        w.add_tensor(name, (rng.standard_normal(shape) * s / np.sqrt(shape[-1])).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    return t, ones


def write_gemma4(path: Path, vocab_from: Path, seed: int = 0, trunk: float = 0.3, n_layer: int = 5,
                 n_ff: int = 128, n_ctx: int = 2048) -> Path:
    """A Gemma-4 target of ``n_layer`` blocks, every 5th full attention, the others sliding-window (the last
    block is full and the one before it sliding-window, as the assistant needs)."""
    rng = np.random.default_rng(seed)
    arch = "gemma4"
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name(f"tiny-gemma4-s{seed}")
    n_vocab = _copy_vocab(w, vocab_from)
    swa = [(i + 1) % 5 != 0 for i in range(n_layer)]
    swa[-1], swa[-2] = False, True
    _common(w, arch, n_ctx, swa, n_ff)
    w.add_embedding_length(N_EMBD)
    w.add_uint32(f"{arch}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{arch}.embedding_length_per_layer_input", 0)
    t, ones = _makers(w, rng)
    embd, out = _shared(n_vocab)
    w.add_tensor("token_embd.weight", embd.astype(np.float16))
    w.add_tensor("output.weight", out.astype(np.float16))
    ones("output_norm.weight", N_EMBD)
    ones("rope_freqs.weight", HEAD_DIM // 2)
    for i in range(n_layer):
        _block(w, t, ones, f"blk.{i}.", N_EMBD, n_ff, trunk, kv=True)
    _finish(w)
    return path


def write_gemma4_assistant(path: Path, vocab_from: Path, seed: int = 0, head: float = 0.3, mix: float = 0.3,
                           n_layer: int = 2, n_ff: int = 64, n_ctx: int = 2048) -> Path:
    """A Gemma-4 assistant of ``n_layer`` blocks (all of them drafting layers: ``nextn_predict_layers`` =
    ``n_layer``), sliding-window except the last, ``N_EMBD_A`` wide, reading an ``N_EMBD``-wide target."""
    rng = np.random.default_rng(seed)
    arch = "gemma4-assistant"
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name(f"tiny-gemma4-assistant-s{seed}")
    n_vocab = _copy_vocab(w, vocab_from)
    _common(w, arch, n_ctx, [i < n_layer - 1 for i in range(n_layer)], n_ff)
    w.add_embedding_length(N_EMBD_A)
    w.add_uint32(f"{arch}.embedding_length_out", N_EMBD)
    w.add_uint32(f"{arch}.nextn_predict_layers", n_layer)
    t, ones = _makers(w, rng)
    _, out = _shared(n_vocab)
    w.add_tensor("token_embd.weight", out[:, :N_EMBD_A].astype(np.float16))  # tied: the output matrix too
    ones("output_norm.weight", N_EMBD_A)
    ones("rope_freqs.weight", HEAD_DIM // 2)
    pre = np.zeros((N_EMBD_A, 2 * N_EMBD), dtype=np.float32)  # cur = pre @ [x_p | h_{p-1}]
    pre[:, :N_EMBD_A] = np.eye(N_EMBD_A)
    pre[:, N_EMBD:] = rng.standard_normal((N_EMBD_A, N_EMBD)) * mix / np.sqrt(N_EMBD)
    w.add_tensor("nextn.pre_projection.weight", pre)
    post = np.zeros((N_EMBD, N_EMBD_A), dtype=np.float32)  # the assistant's own row for its next step
    post[:N_EMBD_A] = np.eye(N_EMBD_A)
    w.add_tensor("nextn.post_projection.weight", post)
    for i in range(n_layer):
        _block(w, t, ones, f"blk.{i}.", N_EMBD_A, n_ff, head, kv=False)
    _finish(w)
    return path


if __name__ == "__main__":  # python tests/support/tinygemma4.py VOCAB.gguf OUT_DIR: the pair the tests use, for bench
    import sys

    out_dir = Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    print(write_gemma4(out_dir / "tiny-gemma4.gguf", Path(sys.argv[1]), seed=1))
    print(write_gemma4_assistant(out_dir / "tiny-gemma4-assistant.gguf", Path(sys.argv[1]), seed=1))
