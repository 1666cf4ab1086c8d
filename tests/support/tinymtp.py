"""Recipe for a made-up Qwen3.5 GGUF with an MTP (NextN) block: random weights, a few MB, loaded by the real
llama.cpp, which builds its MTP draft graph for this arch (``llama_model_qwen35::graph_mtp``).

Qwen3.5 is hybrid (gated delta-net blocks and gated attention blocks); the MTP block is one more attention
block, after the trunk, that reads the token ``x_{p+1}`` and the target's hidden row ``h_p`` and predicts
``x_{p+2}``. The weights are shaped so that the result is testable:

- the trunk's blocks are noise scaled by ``trunk``: at 0 the target is a bigram model (its next token depends
  on the current token only: ``h_p`` is the normed embedding of ``x_p``), larger values mix in the context;
- the MTP block copies the normed embedding of ``x_{p+1}`` through (``eh_proj`` = [I | mix·noise], its
  attention and FFN outputs scaled by ``head``), so with ``trunk = head = mix = 0`` it predicts exactly what
  the target will (every draft accepted) and with noise it disagrees now and then (rejections); ``mix`` makes
  its prediction depend on ``h_p``, so a wrong pairing of tokens and hidden rows changes the drafts.

The vocabulary is copied from a real GGUF (the demo SmolLM2). These files test correctness only.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from support.nextnparts import Parts
from support.tinyhybrid import _copy_vocab


def write_qwen35_mtp(path: Path, vocab_from: Path, seed: int = 0, trunk: float = 0.3, head: float = 0.3,
                     mix: float = 0.3, n_embd: int = 64, n_layer: int = 2, n_ff: int = 128, n_head: int = 4,
                     n_head_kv: int = 2, n_ctx: int = 2048, mtp: bool = True) -> Path:
    """A Qwen3.5 model of ``n_layer`` trunk blocks (delta-net, then attention every 2nd) and, with ``mtp``,
    one MTP block (``nextn_predict_layers`` = 1, stored as block ``n_layer``)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch="qwen35")
    w.add_name(f"tiny-qwen35-mtp-s{seed}")
    n_vocab = _copy_vocab(w, vocab_from)
    head_dim = n_embd // n_head
    d_state, n_group, dt_rank, d_conv = 16, 2, 4, 4  # delta-net: key_dim 32, value_dim 64
    key_dim, value_dim = d_state * n_group, d_state * dt_rank
    n_all = n_layer + (1 if mtp else 0)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_all)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(8)
    w.add_rope_dimension_sections([2, 1, 1, 0])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_ssm_group_count(n_group)
    w.add_full_attention_interval(2)
    if mtp:
        w.add_nextn_predict_layers(1)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    parts = Parts(w, rng)
    t, ones = parts.noise, parts.ones
    parts.embeddings(n_vocab, n_embd)

    def attention(p: str, s: float) -> None:
        ones(p + "attn_q_norm.weight", head_dim)
        ones(p + "attn_k_norm.weight", head_dim)
        t(p + "attn_q.weight", 2 * n_head * head_dim, n_embd, s=1.0)  # query and its gate
        t(p + "attn_k.weight", n_head_kv * head_dim, n_embd, s=1.0)
        t(p + "attn_v.weight", n_head_kv * head_dim, n_embd, s=1.0)
        t(p + "attn_output.weight", n_embd, n_head * head_dim, s=s)

    def block(p: str, s: float) -> None:
        ones(p + "attn_norm.weight", n_embd)
        ones(p + "post_attention_norm.weight", n_embd)
        t(p + "ffn_gate.weight", n_ff, n_embd, s=1.0)
        t(p + "ffn_up.weight", n_ff, n_embd, s=1.0)
        t(p + "ffn_down.weight", n_embd, n_ff, s=s)

    for i in range(n_layer):
        p = f"blk.{i}."
        block(p, trunk)
        if (i + 1) % 2 == 0:
            attention(p, trunk)
        else:
            t(p + "attn_qkv.weight", 2 * key_dim + value_dim, n_embd, s=1.0)
            t(p + "attn_gate.weight", value_dim, n_embd, s=1.0)
            t(p + "ssm_conv1d.weight", 2 * key_dim + value_dim, d_conv, s=1.0)
            w.add_tensor(p + "ssm_dt.bias", np.zeros(dt_rank, dtype=np.float32))
            w.add_tensor(p + "ssm_a", -rng.uniform(0.5, 1.0, dt_rank).astype(np.float32))
            t(p + "ssm_beta.weight", dt_rank, n_embd, s=1.0)
            t(p + "ssm_alpha.weight", dt_rank, n_embd, s=1.0)
            ones(p + "ssm_norm.weight", d_state)
            t(p + "ssm_out.weight", n_embd, value_dim, s=trunk)
    if mtp:
        p = f"blk.{n_layer}."
        block(p, head)
        attention(p, head)
        parts.nextn(p, n_embd, mix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":  # python tests/support/tinymtp.py VOCAB.gguf OUT_DIR: the model the tests use, for bench
    import sys

    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    print(write_qwen35_mtp(out / "tiny-qwen35-mtp.gguf", Path(sys.argv[1]), seed=1))
