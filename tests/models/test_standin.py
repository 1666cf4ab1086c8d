"""Stand-in targets (app/models/standin.py, widen.py) on the real SmolLM2-135M with the real llama.cpp.

One x2 F32 stand-in of the demo target (481M parameters, 1.93 GB) serves the module: the catalog's
demo-smollm2-x2, set up in a data folder of its own the hard way. ``launcher.py setup --pair demo-smollm2-x2``
is killed (-9) halfway, then a fresh process sets it up and reports its peak memory. Then: the same text and
logits as the source, every proposer, the file's own description, the label wherever the pair is shown.

Tolerance of the logit comparison: the construction adds exact zeros to every sum and rescales nothing, and on
this project's CPU the x2 and x4 stand-ins give the source's logits to the bit (max difference 0.0 over every
vocabulary entry, 3 prompts × 24 tokens; the x3 of the qwen2 variant too). ``GAP_TOL`` (1e-3 logits) leaves room
for a CPU whose kernels group the longer sums differently; with layers on a GPU the kernels are chosen by shape,
so there the suite's near-tie rule applies (``NEAR_TIE``, as for batched against single-token passes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest

from app.engine.llama.backend import Model
from app.engine.loop import GenConfig
from app.engine.pair import Pair
from app.lab.report import markdown
from app.models import fileops, ggufheader, meta, standin, widen
from app.models.catalog import ModelEntry, load
from app.models.fileops import DiskFullError
from app.service.state import AppState
from app.testing import gpu_layers, load_options
from app.ui.app import _header
from app.ui.panel import esc
from app.ui.tabs.pair import info_html

from support.api_inproc import Served
from support.greedy import NEAR_TIE, assert_same_greedy, checked_run
from support.standin_sources import qwen2_variant

ROOT = Path(__file__).resolve().parents[2]
GAP_TOL = 1e-3 if gpu_layers() == 0 else NEAR_TIE
TOKENS = 8
PROMPTS = ("def fibonacci(n):\n", "<|im_start|>user\nWrite a haiku about rain.<|im_end|>\n<|im_start|>assistant\n")
MEMORY_BOUND = 96 << 20  # the writer's growth past reading the metadata (measured here: about 23 MiB)
SETUP = ("import json, resource, sys\nfrom gguf import GGUFReader\n"
         "from app.models import hardware\nfrom app.models.provision import ensure_pair\n"
         "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
         "reader = GGUFReader(sys.argv[1]); del reader  # what the writer reads first: the metadata with its types\n"
         "hardware.detect()  # llama.cpp's library, which the memory check loads\n"
         "after_metadata = peak()\n"
         "ensure_pair('demo-smollm2-x2')  # what `launcher.py setup --pair demo-smollm2-x2` does\n"
         "print(json.dumps({'after_metadata': after_metadata, 'peak': peak()}))\n")


def _home_with_the_demo_pair(smol_paths, home: Path) -> Path:
    """A data folder of its own holding the demo pair's two files (hard links: same bytes, same manifests)."""
    models = home / "models"
    models.mkdir(parents=True)
    for path in smol_paths:
        for name in (path.name, fileops.manifest_path(path).name):
            try:
                os.link(path.parent / name, models / name)
            except OSError:  # another file system
                shutil.copy2(path.parent / name, models / name)
    return home


def _run(args: list[str], home: Path) -> subprocess.Popen:
    env = dict(os.environ, TANDEM_QUIET="1", TANDEM_HOME=str(home))
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _kill_midway(home: Path, dest: Path) -> dict:
    """``launcher.py setup --pair demo-smollm2-x2``, killed -9 once its unfinished file holds 200 MB."""
    proc = _run(["launcher.py", "setup", "--pair", "demo-smollm2-x2"], home)
    deadline, seen = time.monotonic() + 300, 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            parts = [p for p in dest.parent.iterdir() if p.name.endswith(".part")]
            seen = max([p.stat().st_size for p in parts] + [0])
            if seen > 200e6:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"the derive ended before it could be interrupted: {proc.communicate()}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    return {"part_bytes": seen, "dest": dest.exists(), "manifest": fileops.manifest_path(dest).exists()}


@pytest.fixture(scope="module")
def x2(smol_paths, tmp_path_factory):
    """The catalog's demo-smollm2-x2 target, set up in a data folder of its own: killed halfway, then set up
    again in a fresh process that reports its memory."""
    home = _home_with_the_demo_pair(smol_paths, tmp_path_factory.mktemp("standin-home"))
    dest = home / "models" / load().models["smollm2-135m-instruct-standin-x2"].file
    killed = _kill_midway(home, dest)
    proc = _run(["-c", SETUP, str(smol_paths[0])], home)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return SimpleNamespace(path=dest, source=smol_paths[0], killed=killed, said=out,
                           memory=json.loads(out.strip().splitlines()[-1]))


def test_setup_says_what_it_takes_before_deriving(x2):
    said = x2.said.index("about 2.1 GiB of memory to run")
    assert "1.93 GB on disk" in x2.said[:said] and said < x2.said.index("[tandem] derived")


def test_a_derive_killed_halfway_leaves_nothing_usable_and_the_next_one_finishes(x2):
    assert x2.killed["part_bytes"] > 200e6
    assert not x2.killed["dest"] and not x2.killed["manifest"]  # only an unfinished .part, never the file
    assert fileops.is_done(x2.path)
    header = ggufheader.read_file(x2.path)
    ggufheader.check_layout(header, x2.path.stat().st_size)
    # the checksum taken while streaming is the file's
    assert fileops.sha256_file(x2.path) == fileops.recorded_sha256(x2.path)


def test_the_writer_streams_in_bounded_memory(x2):
    growth = x2.memory["peak"] - x2.memory["after_metadata"]
    largest = max(t.n_bytes for t in ggufheader.read_file(x2.path).tensors)  # token_embd: 226 MB
    assert largest > MEMORY_BOUND and x2.path.stat().st_size > 16 * MEMORY_BOUND
    assert growth < MEMORY_BOUND, f"the derive grew by {growth / 2**20:.0f} MiB"


def test_greedy_text_and_logits_are_the_sources(x2):
    small, wide = Model(x2.source, load_options(n_ctx=256)), Model(x2.path, load_options(n_ctx=256))
    worst = 0.0
    try:
        for text in PROMPTS:
            ids = small.tokenize(text)
            assert wide.tokenize(text) == ids
            a, b = small.sync(ids), wide.sync(ids)
            for _ in range(TOKENS):  # both fed the source's greedy tokens: every position compared
                gap_a, gap_b = (np.diff(np.sort(row)[-2:])[0] for row in (a, b))
                worst = max(worst, abs(float(gap_a - gap_b)))
                if gap_a >= NEAR_TIE:
                    assert int(np.argmax(b)) == int(np.argmax(a))
                token = int(np.argmax(a))
                a, b = np.array(small.decode([token])[0]), np.array(wide.decode([token])[0])
    finally:
        small.close()
        wide.close()
    assert worst <= GAP_TOL, f"top-1/top-2 gaps differ by up to {worst}"


def test_it_runs_with_every_proposer(x2, smol_paths):
    with Pair.load(x2.path, smol_paths[1], load_options(n_ctx=1024)) as pair:
        prompt = pair.completion_prompt(PROMPTS[0])
        pair.reset()
        plain, _ = checked_run(pair.target, prompt, GenConfig(max_tokens=TOKENS, speculative=False))
        for proposer in ("draft", "lookup", "auto"):
            pair.reset()
            cfg = GenConfig(max_tokens=TOKENS, proposer=proposer, k=4 if proposer == "lookup" else "auto")
            spec, stats = checked_run(pair.target, prompt, cfg, pair.proposer(cfg))
            assert_same_greedy(pair, prompt, plain, spec, f"{proposer} on the stand-in")
            if proposer == "draft":
                assert stats.drafted > 0


def test_the_file_says_what_it_is(x2):
    header = ggufheader.read_file(x2.path)
    source = ggufheader.read_file(x2.source)
    assert header.text("general.name") == "SmolLM2-135M-Instruct stand-in x2"  # named by the catalog's source
    assert header.integer(standin.KEY_FACTOR) == 2
    assert header.integer("llama.embedding_length") == 2 * source.integer("llama.embedding_length")
    assert header.integer("llama.attention.head_count_kv") == 2 * source.integer("llama.attention.head_count_kv")
    assert header.get("llama.attention.layer_norm_rms_epsilon") == source.get("llama.attention.layer_norm_rms_epsilon")
    info = standin.info(x2.path)
    assert info is not None and info.factor == 2 and info.params == meta.read(x2.path)[0].params
    assert standin.caption(x2.path) == "stand-in: SmolLM2-135M-Instruct's text at the cost of a 481M model"
    assert standin.caption(x2.source) is None
    est = standin.estimate(x2.source, 2)
    assert est.params == info.params and abs(est.file_bytes - x2.path.stat().st_size) < 4096


def test_a_qwen2_model_keeps_its_biases_and_its_logits(smol_paths, tmp_path):
    source = qwen2_variant(smol_paths[0], tmp_path / "qwen2.gguf", layers=1)
    wide = standin.derive(source, 3, tmp_path / "qwen2.x3.gguf")  # 3: not a power of two either
    assert ggufheader.read_file(wide).integer("qwen2.attention.head_count") == 27
    models = [Model(p, load_options(n_ctx=128)) for p in (source, wide)]
    try:
        ids = models[0].tokenize(PROMPTS[0])
        rows = [m.sync(ids) for m in models]
        for _ in range(4):
            assert np.max(np.abs(rows[0] - rows[1])) <= GAP_TOL
            token = int(np.argmax(rows[0]))
            rows = [np.array(m.decode([token])[0]) for m in models]
    finally:
        for m in models:
            m.close()


def _tiny(path: Path, arch: str, extra: str = "") -> Path:
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    if extra:
        w.add_tensor(extra, np.zeros((2, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_what_cannot_be_widened_is_refused_with_the_reason(gemma_paths, tmp_path):
    with pytest.raises(standin.StandinError, match=r"gemma3 scales the token embeddings by sqrt\(n_embd\)"):
        standin.estimate(gemma_paths[0], 2)
    with pytest.raises(standin.StandinError, match="checked for llama and qwen2 only"):
        standin.estimate(_tiny(tmp_path / "phi.gguf", "phi3"), 2)
    with pytest.raises(standin.StandinError, match="'blk.0.ffn_gate_inp.weight' is not one a stand-in knows"):
        standin.estimate(_tiny(tmp_path / "moe.gguf", "llama", "blk.0.ffn_gate_inp.weight"), 2)
    for factor in (1, 65, True, 2.0):
        with pytest.raises(standin.StandinError, match="whole number from 2 to 64"):
            standin.estimate(gemma_paths[0], factor)
    assert not list(tmp_path.glob("*.part"))


def test_sizes_and_factors_come_from_the_header_alone(smol_paths):
    source = smol_paths[0]
    sizes = [standin.estimate(source, f) for f in (2, 4, 8)]
    assert [s.params_label for s in sizes] == ["481M", "1.8B", "7.0B"]
    assert standin.estimate(source, 4, "F16").file_bytes < 0.51 * sizes[1].file_bytes
    assert standin.factor_for(source, params=1.7e9) == 4
    assert standin.factor_for(source, gib=7.0) == 4 and standin.factor_for(source, gib=6.5) == 3
    with pytest.raises(standin.StandinError, match="smallest \\(x2\\) takes 1.79 GiB"):
        standin.factor_for(source, gib=1)
    with pytest.raises(standin.StandinError, match="not both or neither"):
        standin.factor_for(source)


def test_the_catalog_stand_ins_match_their_estimates(smol_paths):
    cat = load()
    entries = [m for m in cat.models.values() if m.widen]
    assert {m.widen for m in entries} == {2, 4, 8}
    for m in entries:
        est = standin.estimate(smol_paths[0], m.widen, m.ftype or "F32")
        assert (m.params, m.embd, m.heads, m.kv_heads, m.head_dim, m.layers, m.vocab) == \
            (est.params_label, est.n_embd, est.n_head, est.n_head_kv, est.head_dim, est.n_layers, est.n_vocab)
        assert m.size is not None and abs(m.size - est.file_bytes) < 4096
        pair = cat.pairs[f"demo-smollm2-x{m.widen}"]
        assert pair.target == m.id and pair.on_demand and not pair.use  # never recommended for a task


def test_what_would_not_fit_is_refused_with_the_figures_before_writing(smol_paths, tmp_path):
    cat = load()
    source_entry = cat.models["smollm2-135m-instruct-f32"]
    entry = ModelEntry(id="huge", name="huge", family="smollm2", file="huge.gguf", derive_from=source_entry.id,
                       ftype="F32", widen=64)  # about 440B parameters: more memory than any machine here
    with pytest.raises(standin.StandinError, match=r"huge would need about [\d.]+ GiB of memory to run"):
        standin.provision(entry, source_entry, smol_paths[0], tmp_path / "huge.gguf")
    with pytest.raises(DiskFullError, match="for the stand-in x64"):
        standin.derive(smol_paths[0], 64, tmp_path / "huge.gguf")  # derive() itself checks the disk only
    assert list(tmp_path.iterdir()) == []


def test_the_rules_pad_in_whole_heads_and_keep_per_head_tensors(smol_paths):
    header = ggufheader.read_file(smol_paths[0])
    by_name = {t.name: t for t in header.tensors}
    q, k, embd = by_name["blk.0.attn_q.weight"], by_name["blk.0.attn_k.weight"], by_name["token_embd.weight"]
    assert widen.widened_shape(q, 4) == (4 * 576, 4 * 576)  # 36 heads of 64 over 2304
    assert widen.widened_shape(k, 4) == (4 * 192, 4 * 576)  # 12 kv heads: the GQA ratio 3 kept
    assert widen.widened_shape(embd, 4) == (49152, 4 * 576)
    assert widen.RULES["rope_freqs.weight"].dims == (widen.Dim.KEPT,)


def test_every_place_the_pair_is_shown_says_it_is_a_stand_in(x2, smol_paths, smol_pair):
    caption = standin.caption(x2.path)
    with Pair.load(x2.path, smol_paths[1], load_options(n_ctx=512)) as pair:
        served = Served(pair, pair_id="demo-smollm2-x2")
        try:
            assert served.state.describe_pair()["standin"] == caption
            shown = esc(caption)  # as the page's HTML writes it
            assert shown in _header(served.state) and shown in info_html(served.state)
            status, _, body = served.get("/v1/models")
            assert status == 200 and json.loads(body)["data"][0]["standin"] == caption
            reply = served.client().completions.create(model="demo-smollm2-x2", prompt="Once upon a time",
                                                       max_tokens=4)
            assert reply.model_extra["stats"]["standin"] == caption
        finally:
            served.close()
    assert caption in markdown({"cells": []}, {"standin": caption})  # the Pair lab's report
    plain = AppState(pair=smol_pair)
    assert plain.describe_pair()["standin"] is None and "stand-in" not in _header(plain)


def test_the_command_line_estimates_and_refuses_before_writing(smol_paths, gemma_paths):
    def standin_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "launcher.py", "models", "standin", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    out = standin_cli("smollm2-135m-instruct-f32", "--params", "1.8B", "--estimate")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("x4 of smollm2-135m-instruct-f32: 1.8B parameters (30 layers, n_embd 2304, 36/12")
    refused = standin_cli(str(gemma_paths[0]), "--factor", "2")
    assert refused.returncode == 2 and "sqrt(n_embd)" in refused.stderr
