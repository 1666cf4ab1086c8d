"""Catalog validation, fit estimates against hand-computed figures, labels and recommendations."""

from __future__ import annotations

import pytest

from app.models import advice, catalog, fit, hardware
from app.models.fit import GIB, Machine, Settings

CPU_ONLY = Machine(cpu_cores=8, ram_total=64 * GIB, ram_available=64 * GIB)


@pytest.fixture
def cat(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))  # nothing installed, no header read
    return catalog.load()


def test_catalog_has_hub_pairs_and_loads_cleanly(cat):
    assert cat.errors == []
    hub = [p for p in cat.pairs.values() if cat.models[p.target].repo and cat.models[p.draft].repo]
    assert len(hub) >= 8
    assert len({cat.models[p.target].family for p in hub}) >= 4
    assert cat.default_pair().id == "demo-smollm2"


def test_bad_entries_are_reported_and_the_rest_loads(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text("""
[models.good]
name = "Good"
family = "x"
file = "good.gguf"
repo = "org/good"
[models.bad-size]
name = "Bad"
family = "x"
file = "bad.gguf"
repo = "org/bad"
size = "big"
[models.no-source]
name = "None"
family = "x"
file = "n.gguf"
[pairs.ok]
name = "ok"
target = "good"
draft = "good"
[pairs.dangling]
name = "d"
target = "good"
draft = "bad-size"
[pairs.bad-k]
name = "k"
target = "good"
draft = "good"
k = 0
""")
    got = catalog.load(path)
    assert list(got.models) == ["good"] and list(got.pairs) == ["ok"]
    text = "\\n".join(got.errors)
    assert "models.bad-size: field 'size'" in text
    assert "models.no-source: field 'repo'" in text
    assert "pairs.dangling: field 'draft'" in text
    assert "pairs.bad-k: field 'k'" in text


def shapes(cat, pair_id):
    pair = cat.pairs[pair_id]
    return advice.shape_of(cat.models[pair.target], cat), advice.shape_of(cat.models[pair.draft], cat)


def test_qwen25_coder_7b_pair_by_hand(cat):
    t, d = shapes(cat, "qwen25-coder-7b")
    s = Settings(ctx=4096)
    # KV: 28 layers x 4096 cells x 4 KV heads x (128 + 128) x 2 bytes = 224 MiB (llama.cpp logs the same)
    assert fit.kv_bytes(t, 4096) == 234_881_024
    # draft: 24 x 4096 x 2 x (64 + 64) x 2 = 48 MiB
    assert fit.kv_bytes(d, 4096) == 50_331_648
    # compute: 512 x (152064 + 4 x 3584) x 4
    assert fit.compute_bytes(t) == 340_787_200
    total = (4_683_073_184 + 234_881_024 + 340_787_200) + (531_068_960 + 50_331_648 + 512 * (151_936 + 4 * 896) * 4)
    p8 = fit.plan(t, d, hardware.override(CPU_ONLY, vram_gib=8), s)
    assert (p8.fit, p8.total_bytes, p8.target_gpu_layers, p8.draft_gpu_layers) == ("gpu", total, 29, 25)
    # 6 GiB: 5 GiB usable; the draft (899 905 568) first, then (budget - compute) // per layer,
    # per layer = 4 683 073 184 // 29 + 234 881 024 // 28 = 161 485 282 + 8 388 608
    p6 = fit.plan(t, d, hardware.override(CPU_ONLY, vram_gib=6), s)
    left = 5 * GIB - 899_905_568 - 340_787_200
    assert p6.fit == "partial" and p6.target_gpu_layers == left // (161_485_282 + 8_388_608) == 24
    assert fit.plan(t, d, CPU_ONLY, s).fit == "cpu"
    assert fit.plan(t, d, hardware.override(CPU_ONLY, vram_gib=0, ram_gib=4), s).fit == "no"


def test_llama31_8b_pair_by_hand_with_q8_cache(cat):
    t, d = shapes(cat, "llama31-8b")
    # 32 x 8192 x 8 x 256 elements of q8_0 (34 bytes per 32) = 544 MiB
    assert fit.kv_bytes(t, 8192, "q8_0") == 32 * 8192 * 8 * 256 * 34 // 32 == 570_425_344
    # draft: 16 x 8192 x 8 x 128 x 34 / 32 = 136 MiB
    assert fit.kv_bytes(d, 8192, "q8_0") == 142_606_336
    p = fit.plan(t, d, hardware.override(CPU_ONLY, vram_gib=8), Settings(ctx=8192, cache_type="q8_0"))
    expected = (4_920_734_016 + 570_425_344 + 512 * (128_256 + 4 * 4096) * 4
                + 1_321_083_200 + 142_606_336 + 512 * (128_256 + 4 * 2048) * 4)
    assert p.total_bytes == expected and p.fit == "partial" and p.draft_gpu_layers == 17


def test_sliding_window_layers_keep_a_full_cache_as_tandem_loads_them(cat):
    t, _ = shapes(cat, "gemma3-27b")
    # llama.cpp's default swa_full (what Tandem loads with): all 62 layers x 32768 cells, 16 KV heads x 256 x 2
    # bytes; seen on demo-gemma3's load log: "using full-size SWA cache", 15 SWA layers x 4096 cells = 60 MiB
    assert fit.kv_bytes(t, 32768) == 62 * 32768 * 16 * 256 * 2
    # with swa_full off: 10 global layers x 32768 cells + 52 SWA layers x (1024 + 512) cells
    assert fit.kv_bytes(t, 32768, swa_full=False) == (10 * 32768 + 52 * 1536) * 16 * 256 * 2


def test_labels_and_recommendations(cat):
    rows = advice.label_pairs(cat, hardware.override(CPU_ONLY, vram_gib=24, ram_gib=64))
    by = {r["pair"]: r for r in rows}
    assert by["qwen25-coder-7b"]["fit"] == "gpu" and by["qwen25-coder-7b"]["estimated_bytes"] > 0
    figures = lambda m: all(getattr(cat.models[m], f) for f in ("size", "layers", "embd", "kv_heads", "head_dim", "vocab"))  # noqa: E731
    # a model whose figures come from its GGUF header alone (read from the Hub on demand) is "unknown" until then
    assert all(r["fit"] in ("gpu", "partial", "cpu", "no") or not (figures(r["target"]) and figures(r["draft"]))
               for r in rows)
    assert sum(r["fit"] != "unknown" for r in rows) >= 12
    best = advice.recommend(rows)
    assert best["code"] in by and "code" in by[best["code"]]["use"] and by[best["code"]]["fit"] == "gpu"
    small = advice.recommend(advice.label_pairs(cat, hardware.override(CPU_ONLY, vram_gib=0, ram_gib=1)))
    assert small == {"code": None, "chat": None} or all(v is None or v.startswith("demo") for v in small.values())


def test_hardware_detection_and_nvidia_smi_parsing():
    m = hardware.detect()
    assert m.cpu_cores >= 1 and m.ram_total > 0
    devs = hardware.parse_nvidia_smi("NVIDIA GeForce RTX 3090, 24576, 23000\nbad line\n")
    assert len(devs) == 1 and devs[0].total == 24576 << 20 and devs[0].free == 23000 << 20
    assert "GPU" in hardware.summary(hardware.override(m, vram_gib=12))
