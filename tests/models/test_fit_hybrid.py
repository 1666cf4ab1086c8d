"""The fit estimate for hybrid memory (a KV cache in the attention layers only, plus the recurrent state kept
1 + n_rs_seq times), MTP heads and Gemma-4 assistant drafters: figures read from made-up GGUF headers are
checked against what the real llama.cpp allocates for those files, and the catalog's 2026 entries estimate."""

from __future__ import annotations

import pytest

from app.engine.llama.backend import Model
from app.engine.llama.memory import DEFAULT_RS_SNAPSHOTS
from app.models import advice, catalog, fit, meta
from app.testing import load_options
from support.tinygemma4 import write_gemma4, write_gemma4_assistant
from support.tinyhybrid import write_lfm2
from support.tinymtp import write_qwen35_mtp


@pytest.fixture(scope="module")
def files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("fit-hybrid")
    vocab = smol_paths[1]
    return {"qwen35": write_qwen35_mtp(d / "q.gguf", vocab, n_layer=4), "lfm2": write_lfm2(d / "l.gguf", vocab),
            "gemma4": write_gemma4(d / "g.gguf", vocab), "assistant": write_gemma4_assistant(d / "a.gguf", vocab)}


def _recurrent_mib(path) -> float:
    """The recurrent-state buffer llama.cpp allocates for ``path`` (as its load log says), in MiB."""
    with Model(path, load_options(n_ctx=256)) as m:
        found = [n for _, kind, n in m.placement().buffers if kind == "RS"]
    assert found, "llama.cpp logged no recurrent-state buffer"
    return sum(found) / 2 ** 20


def test_hybrid_meta_counts_attention_layers_and_the_state(files):
    q, _ = meta.read(files["qwen35"])
    assert (q.n_layers, q.nextn_layers, q.attn_layers) == (5, 1, 2)  # 4 trunk blocks, every 2nd attention
    lf, _ = meta.read(files["lfm2"])
    assert lf.attn_layers == 2 and lf.state_floats == 2 * 64 * 2  # two short-convolution layers, L_cache 3
    assert fit.RS_SNAPSHOTS == DEFAULT_RS_SNAPSHOTS
    for path, m in ((files["qwen35"], q), (files["lfm2"], lf)):
        shape = advice.shape_from_meta(path.name, m)
        state_mib = shape.state_bytes * (1 + fit.RS_SNAPSHOTS) / 2 ** 20
        assert state_mib == pytest.approx(_recurrent_mib(path), abs=0.006)


def test_hybrid_kv_counts_attention_layers_only_and_the_mtp_context(files):
    q, _ = meta.read(files["qwen35"])
    shape = advice.shape_from_meta("q", q)
    plain = fit.ModelShape("t", 1, q.n_layers, q.n_embd, q.n_head_kv, q.head_dim_k, q.head_dim_v, q.n_vocab)
    per_layer = fit.kv_bytes(plain, 1024) // q.n_layers
    state = shape.state_bytes * (1 + fit.RS_SNAPSHOTS)
    assert fit.kv_bytes(shape, 1024) == (q.attn_layers + q.nextn_layers) * per_layer + state


def test_gemma4_assistant_has_no_cache_of_its_own(files):
    a, _ = meta.read(files["assistant"])
    g, _ = meta.read(files["gemma4"])
    assert a.architecture == "gemma4-assistant" and a.attn_layers == 0
    assert fit.kv_bytes(advice.shape_from_meta("a", a), 4096) == 0
    assert g.attn_layers == -1 and fit.kv_bytes(advice.shape_from_meta("g", g), 4096) > 0


def test_catalog_estimates_the_qwen36_pairs():
    cat = catalog.load()
    machine = fit.Machine(cpu_cores=8, ram_total=64 << 30, ram_available=48 << 30,
                          gpus=(fit.Device("gpu", 24 << 30, 23 << 30),))
    rows = {r["pair"]: r for r in advice.label_pairs(cat, machine)}
    for pid in ("qwen36-27b", "qwen36-27b-mtp-16gb", "qwen36-27b-mtp-24gb"):
        assert rows[pid]["fit"] != "unknown" and rows[pid]["estimated_bytes"] > 15 << 30
    t = advice.shape_of(cat.models["qwen36-27b-mtp-q5_k_m"], cat)
    assert t.attn_layers == 16 and t.nextn_layers == 1 and t.state_bytes == 48 * 817152 * 4
    assert "gemma4-12b-assistant" in rows and cat.models["gemma4-12b-it-assistant-q8_0"].arch == "gemma4-assistant"
