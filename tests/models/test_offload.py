"""GPU layers: the flags, the auto choice with hardware figures injected, and what llama.cpp placed."""

from __future__ import annotations

import json

import pytest

from app.models import offload
from app.cli import build_parser
from app.models import advice, catalog, fit
from app.models.fit import GIB, Device, Machine
from app.engine.llama.devices import gpu_offload_supported
from app.testing import gpu_layers, load_options

NO_GPU = Machine(cpu_cores=8, ram_total=64 * GIB, ram_available=64 * GIB)
GPU_8GB = Machine(cpu_cores=8, ram_total=64 * GIB, ram_available=64 * GIB,
                  gpus=(Device("CUDA0", 8 * GIB, 8 * GIB, description="Fake 8 GB card"),))


@pytest.mark.parametrize("command", [["bench"], ["tune"], ["ui"], ["models", "fit"]])
def test_gpu_layer_flags_parse_with_llama_cpp_aliases(command):
    parser = build_parser()
    args = parser.parse_args(command)
    assert (args.gpu_layers, args.draft_gpu_layers) == ("auto", "auto")
    args = parser.parse_args([*command, "-ngl", "12", "-ngld", "all"])
    assert (args.gpu_layers, args.draft_gpu_layers) == (12, -1)
    args = parser.parse_args([*command, "--gpu-layers", "-1", "--draft-gpu-layers", "0"])
    assert (args.gpu_layers, args.draft_gpu_layers) == (-1, 0)
    assert parser.parse_args([*command, "--gpu-layers", "AUTO"]).gpu_layers == "auto"


def test_bad_gpu_layers_are_refused_with_the_reason(capsys):
    for bad in ("lots", "-2", "1.5"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", "-ngl", bad])
        assert "GPU layers must be" in capsys.readouterr().err
    with pytest.raises(ValueError, match="'all' or 'auto'"):
        offload.layers_value("")


@pytest.fixture
def cat(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))  # catalog figures only
    return catalog.load()


def test_auto_offloads_a_14b_target_partly_on_an_8gb_gpu_draft_first(cat):
    pair = cat.pairs["qwen3-14b"]
    t, d = (advice.shape_of(cat.models[m], cat) for m in (pair.target, pair.draft))
    o = fit.choose_layers(t, d, GPU_8GB)
    assert o.draft_layers == d.n_layers + 1  # the whole draft first
    assert 0 < o.target_layers < t.n_layers + 1  # then part of the target
    assert o.target_layers == fit.plan(t, d, GPU_8GB).target_gpu_layers
    assert o.gpu_bytes <= o.budget < o.gpu_bytes + fit.unit_bytes(t, o.target)  # one more layer would not fit
    # no GPU: nothing offloaded; a draft kept off the GPU leaves its room to the target
    assert (fit.choose_layers(t, d, NO_GPU).target_layers, fit.choose_layers(t, d, NO_GPU).draft_layers) == (0, 0)
    more = fit.choose_layers(t, d, GPU_8GB, want_draft=0)
    assert more.draft_layers == 0 and more.target_layers > o.target_layers
    given = fit.choose_layers(t, d, GPU_8GB, want_target=5, want_draft=-1)
    assert (given.target_layers, given.draft_layers) == (5, d.n_layers + 1)


def test_choose_for_files_says_what_it_chose(smol_paths):
    none = offload.choose(*smol_paths, machine=NO_GPU, can_offload=True)
    assert (none.target_layers, none.draft_layers) == (0, 0) and "no GPU" in none.line
    big = offload.choose(*smol_paths, machine=GPU_8GB, can_offload=True)
    assert (big.target_layers, big.draft_layers) == (31, 31) and "Fake 8 GB card" in big.line
    assert "draft 31/31 (auto), target 31/31 (auto)" in big.line
    cpu_build = offload.choose(*smol_paths, machine=GPU_8GB, can_offload=False)
    assert (cpu_build.target_layers, cpu_build.draft_layers) == (0, 0) and "cannot offload" in cpu_build.line
    topts, dopts = big.options(offload.LoadOptions(n_ctx=512))
    assert (topts.n_gpu_layers, dopts.n_gpu_layers, dopts.n_ctx) == (31, 31, 512)


def test_a_loaded_model_reports_its_placement(smol_pair):
    """On the CPU by default; with TANDEM_TEST_GPU_LAYERS=-1 (scripts/gpu-check.sh) every layer on the GPU."""
    on_gpu = gpu_layers() != 0
    for model in (smol_pair.target, smol_pair.draft):
        p = model.placement()
        assert p.layers_total == 31 and p.layers_gpu == (31 if on_gpu else 0) and (p.gpu_bytes > 0) == on_gpu
        if not on_gpu:
            assert set(p.by_device()) == {"CPU"} and p.host_bytes > model.size_bytes  # weights + KV + compute
    report = offload.gpu_report(smol_pair.target, smol_pair.draft, None)
    assert (report["backend"] != "CPU") == on_gpu and (report["used_gpu_bytes"] > 0) == on_gpu
    assert report["target"]["layers_placed"] == (31 if on_gpu else 0) and report["draft"]["used_bytes"]["CPU"] > 0



def test_the_kv_estimate_is_what_llama_cpp_allocates_for_sliding_window_layers(gemma_paths):
    """Gemma-3's 15 sliding-window layers keep a full-size cache (llama.cpp's default swa_full, as Tandem loads
    them): the estimate once gave them window + n_ubatch cells, 45 MiB short on the demo target."""
    from app.engine.llama.backend import Model
    from app.models import advice, meta

    target = gemma_paths[0]
    shape = advice.shape_from_meta(target.name, meta.read(target)[0])
    assert shape.swa_window and shape.swa_layers
    model = Model(target, load_options(n_ctx=4096))  # KV buffers on whatever device, summed
    try:
        kv = sum(n for _, kind, n in model.placement().buffers if kind == "KV")
    finally:
        model.close()
    assert kv == fit.kv_bytes(shape, 4096)


def test_pair_load_gives_the_draft_the_target_s_offload(smol_paths):
    from app.engine.pair import Pair, draft_options_for

    with Pair.load(*smol_paths, offload.LoadOptions(n_ctx=256)) as pair:
        assert pair.draft.options.n_gpu_layers == 0 and pair.draft.n_ctx == pair.target.n_ctx
        assert draft_options_for(pair.target).n_gpu_layers == 0
    with Pair.load(smol_paths[0], None, offload.LoadOptions(n_ctx=256, n_gpu_layers=3)) as pair:
        assert draft_options_for(pair.target).n_gpu_layers == -1  # the draft goes first


def test_models_fit_place_shows_estimated_and_placed(smol_paths, capsys):
    from app.cli import main

    assert main(["models", "fit", "--place", "demo-smollm2", "--ctx", "512"]) == 0
    out = capsys.readouterr().out
    assert "placed demo-smollm2: GPU layers:" in out
    placed = 31 if gpu_offload_supported() else 0  # auto: everything on a GPU where there is one
    assert f"{placed}/31 layers placed on the GPU" in out and "estimated" in out and "CPU " in out
    assert main(["models", "fit", "--place", "demo-smollm2", "--ctx", "512", "-ngl", "0", "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)["placement"]
    t = placed["target"]
    assert placed["pair"] == "demo-smollm2" and t["requested"] == 0 and t["layers_placed"] == 0
    # the fit estimate of everything llama.cpp allocated is within 10 % of what it reports
    used = sum(t["used_bytes"].values())  # a CUDA build keeps some buffers on the GPU even with -ngl 0
    assert abs(t["estimated_bytes"] - used) < 0.1 * used
    assert main(["models", "fit", "--place", "no-such-pair"]) == 2  # one line through the CLI error path
    assert "unknown pair" in capsys.readouterr().err


def test_gpu_check_script_fails_clearly_without_a_gpu(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")  # a driver tool that lists no device
    (fake / "nvidia-smi").chmod(0o755)
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu-check.sh"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))
    assert proc.returncode == 1 and "lists no GPU" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing started


def test_gpu_summary_tables_what_the_script_wrote(tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("gpu_summary", Path(__file__).resolve().parents[2] / "scripts"
                                                  / "gpu_summary.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "device.txt").write_text("NVIDIA H100 80GB HBM3, 81559 MiB, 550.54, 9.0\n")
    (tmp_path / "tests.log").write_text("....\n========== 150 passed, 2 skipped in 99.0s ==========\n")
    gpu = {"target": {"layers_placed": 31, "layers_total": 31, "used_gpu_bytes": 600 << 20,
                      "estimated_gpu_bytes": 620 << 20}}
    (tmp_path / "bench-auto.json").write_text(json.dumps(
        {"command": "python launcher.py bench --k auto", "baseline_tps": 300.0, "spec_tps": 330.0, "speedup": 1.1,
         "identical": True, "mean_k": 6.0, "acceptance_rate": 0.9, "gpu": gpu}))
    (tmp_path / "fit-place.json").write_text(json.dumps({"placement": {"pair": "demo-smollm2", **gpu}}))
    (tmp_path / "llama-bench-target.json").write_text(json.dumps([{"n_prompt": 0, "n_gen": 128, "avg_ts": 512.5}]))
    (tmp_path / "llama-spec-n8.log").write_text("decoded  256 tokens in    0.800 seconds, speed:  320.000 t/s\n"
                                                "accept    = 95.500%\n")
    text = mod.summary(tmp_path)
    assert text.startswith("Device: NVIDIA H100 80GB HBM3")
    assert "| 150 passed, 2 skipped in 99.0s |" in text and "**1.10x**" in text and "spec == plain: yes" in text
    assert "n-max 8: 320.000 t/s, accept 95.500 %" in text and "target 512.5 t/s" in text
    assert "target: 31/31 layers, GPU 600 MiB used vs 620 MiB estimated" in text
    assert "3 measurement(s) not run" in text


def test_pair_settings_load_with_the_asked_layers_and_show_the_placement(smol_paths):
    from app.service.loading import PairOptions, load_into
    from app.service.state import AppState
    from app.ui.tabs import pair as pair_tab

    state = AppState()
    line = load_into(state, PairOptions(*smol_paths, ("auto", 0), 512))
    try:
        assert line.startswith("GPU layers: draft 0/31 (given), target 0/31 (auto)")
        assert state.gpu_layers == ("auto", 0) and state.draft_options.n_gpu_layers == 0
        html = pair_tab.info_html(state)
        assert "GPU layers: draft 0/31" in html and "0/31 layers placed on the GPU" in html and "estimated" in html
    finally:
        state.unload()
