"""Recipe for a made-up GLM-4.5 (``glm4moe``) GGUF with an MTP (NextN) block: random weights, a few MB, loaded by the
real llama.cpp, which builds its MTP draft graph for this arch (``llama_model_glm4_moe::graph_mtp``).

Unlike Qwen3.5 (``tinymtp.py``) GLM-4.5 is attention only, so its target verifies tree drafts. Its trunk blocks are
dense here (``leading_dense_block_count`` covers them); the MTP block is a mixture-of-experts block, as the arch's
MTP graph asks, that reads the token ``x_{p+1}`` and the target's hidden row ``h_p`` (``eh_proj`` = [I | mix·noise],
its attention and FFN outputs scaled by ``head``), so it disagrees with the target now and then (rejections) and its
drafts depend on the rows it is given. The vocabulary is copied from a real GGUF. These files test correctness only.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from support.nextnparts import Parts
from support.tinyhybrid import _copy_vocab


def write_glm4moe_mtp(path: Path, vocab_from: Path, seed: int = 0, trunk: float = 0.3, head: float = 0.3,
                      mix: float = 0.3, n_embd: int = 64, n_layer: int = 2, n_ff: int = 128, n_head: int = 4,
                      n_head_kv: int = 2, n_expert: int = 4, n_ff_exp: int = 32, n_ctx: int = 2048) -> Path:
    """A GLM-4.5 model of ``n_layer`` dense trunk blocks and one MoE MTP block (stored as block ``n_layer``)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch="glm4moe")
    w.add_name(f"tiny-glm4moe-mtp-s{seed}")
    n_vocab = _copy_vocab(w, vocab_from)
    head_dim = n_embd // n_head
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer + 1)
    w.add_feed_forward_length(n_ff)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(2)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(n_layer)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(1.0)
    w.add_nextn_predict_layers(1)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    parts = Parts(w, rng)
    t, ones = parts.noise, parts.ones
    parts.embeddings(n_vocab, n_embd)

    def attention(p: str, s: float) -> None:
        ones(p + "attn_norm.weight", n_embd)
        ones(p + "post_attention_norm.weight", n_embd)
        t(p + "attn_q.weight", n_head * head_dim, n_embd, s=1.0)
        t(p + "attn_k.weight", n_head_kv * head_dim, n_embd, s=1.0)
        t(p + "attn_v.weight", n_head_kv * head_dim, n_embd, s=1.0)
        t(p + "attn_output.weight", n_embd, n_head * head_dim, s=s)

    for i in range(n_layer):
        p = f"blk.{i}."
        attention(p, trunk)
        t(p + "ffn_gate.weight", n_ff, n_embd, s=1.0)
        t(p + "ffn_up.weight", n_ff, n_embd, s=1.0)
        t(p + "ffn_down.weight", n_embd, n_ff, s=trunk)
    p = f"blk.{n_layer}."
    attention(p, head)
    t(p + "ffn_gate_inp.weight", n_expert, n_embd, s=1.0)
    w.add_tensor(p + "exp_probs_b.bias", np.zeros(n_expert, dtype=np.float32))
    t(p + "ffn_gate_exps.weight", n_expert, n_ff_exp, n_embd, s=1.0)
    t(p + "ffn_up_exps.weight", n_expert, n_ff_exp, n_embd, s=1.0)
    t(p + "ffn_down_exps.weight", n_expert, n_embd, n_ff_exp, s=head)
    t(p + "ffn_gate_shexp.weight", n_ff_exp, n_embd, s=1.0)
    t(p + "ffn_up_shexp.weight", n_ff_exp, n_embd, s=1.0)
    t(p + "ffn_down_shexp.weight", n_embd, n_ff_exp, s=head)
    parts.nextn(p, n_embd, mix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
