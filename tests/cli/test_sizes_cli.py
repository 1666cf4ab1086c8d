"""``launcher.py tune --sizes``: a tiny size sweep (x1 and x2, a few tokens) through the real launcher, in a data
folder of its own that reuses the cached SmolLM2 files (x2 is derived there), and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.models import fileops, standin

from support.greedy import assert_bench_greedy

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def launcher(home: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1"))


def scratch_home(tmp_path: Path, smol_paths) -> Path:
    """A data folder of its own whose models are links to the cached demo files (and their manifests)."""
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    for path in map(Path, smol_paths):
        for f in (path, fileops.manifest_path(path)):
            (home / "models" / f.name).symlink_to(f)
    return home


def test_a_tiny_size_sweep_measures_plots_and_keeps_a_history_run(tmp_path, smol_paths):
    home = scratch_home(tmp_path, smol_paths)
    out = tmp_path / "sizes.json"
    proc = launcher(home, "tune", "--sizes", "1,2", "--max-tokens", "8", "--size-prompts", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert [(r["factor"], r["ftype"]) for r in result["rows"]] == [(1, "F32"), (2, "F32")]
    x1, x2 = result["rows"]
    assert x1["params"] < x2["params"] and x2["label"] == "x2 F32 (481M)"
    for r in result["rows"]:  # every figure the plot and the recommendation rest on
        assert r["baseline_tps"] > 0 and r["spec_tps"] > 0 and r["speedup"] > 0 and r["c"] > 0 and r["v"] > 0
        assert r["bound"] > 0 and 0 <= r["acceptance_rate"] <= 1 and r["prompts"] == 1 and r["complete"]
        assert_bench_greedy(r["identical"], r["mismatches"])
    # at x1 the draft takes a copy of the target's cache (one network at two precisions), at x2 it reads the
    # history itself (another shape): said per size, as it moves the draft's cost and its proposals
    assert "took a copy of the target's KV cache" in x1["draft_cache"]
    assert x2["draft_cache"].startswith("the draft model read the history itself")
    rec = result["recommendation"]
    assert rec["kind"] in ("crossing", "all", "none") and rec["line"].startswith("On this machine")
    assert rec["line"] in proc.stdout

    derived = home / "models" / "SmolLM2-135M-Instruct.standin-x2.F32.gguf"  # the catalog's name: setup reuses it
    assert fileops.is_done(derived) and standin.info(derived).factor == 2
    assert all(f.is_symlink() for f in (home / "models").iterdir() if "standin" not in f.name)
    for name in ("speedup_vs_size", "speedup_vs_c"):
        assert Path(result["files"][name]).read_bytes()[:8] == PNG
    assert "x2 F32 (481M)" in Path(result["files"]["report"]).read_text()
    assert "x1 F32 (135M)" in proc.stdout and "x2 F32 (481M)" in proc.stdout and "reproduce:" in proc.stdout

    listed = launcher(home, "tune", "--history")
    assert listed.returncode == 0 and f"#{result['run_id']}" in listed.stdout and " sizes " in listed.stdout
    shown = launcher(home, "tune", "--show", str(result["run_id"]))
    assert "how big must the target be?" in shown.stdout and rec["line"] in shown.stdout


def test_what_the_size_sweep_cannot_do_is_refused_in_one_line(tmp_path, smol_paths):
    home = scratch_home(tmp_path, smol_paths)
    for args, says in [(("--sizes", "1,3.5"), "'3.5' is not a size"),
                       (("--sizes", "1,2", "--k", "2,4"), "one fixed K at every size"),
                       (("--sizes", "1,2", "--k", "auto"), "one fixed K at every size"),
                       (("--sizes", "1,2", "--temperature", "0.7"), "decodes greedily")]:
        proc = launcher(home, "tune", *args)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert sorted(f.name for f in (home / "models").iterdir() if not f.is_symlink()) == []  # nothing derived
