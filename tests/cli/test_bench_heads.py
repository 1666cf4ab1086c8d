"""``bench`` with a head that reads its target's layers (an EAGLE-3 head, a DFlash or DSpark block drafter), through
the real launcher: on made-up Llama targets and their made-up heads (random weights: correctness, never speed) the
speculative output equals plain decoding; a head beside a target whose architecture records no layer inputs (the
demo Gemma-3, which llama.cpp would abort on) is refused in one line of stderr with exit 2 before the target is
loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.models import meta
from support.tinydflash import write_dflash, write_target
from support.tinyeagle3 import write_eagle3, write_llama
from support.tinyglm4mtp import write_glm4moe_mtp

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TANDEM_HOME=str(tmp_path / "home"), TANDEM_QUIET="1")
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), "bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory, smol_paths, gemma_paths):
    d = tmp_path_factory.mktemp("bench-heads")
    gemma = meta.read(gemma_paths[0])[0]
    return {
        "target": write_llama(d / "tiny-llama.gguf", smol_paths[1], seed=1),
        "head": write_eagle3(d / "tiny-eagle3.gguf", smol_paths[1], seed=1),
        "gemma_target": Path(gemma_paths[0]),
        "gemma_head": write_eagle3(d / "gemma-eagle3.gguf", gemma_paths[1], seed=1, target_hidden=gemma.n_embd,
                                   layers=(2, gemma.n_layers // 2, gemma.n_layers - 3)),
        "flag_target": write_target(d / "tiny-flag-llama.gguf", smol_paths[1], seed=1),
        "dflash": write_dflash(d / "tiny-dflash.gguf", smol_paths[1], seed=1),
        "dspark": write_dflash(d / "tiny-dspark.gguf", smol_paths[1], seed=1, dspark=True),
        "gemma_dflash": write_dflash(d / "gemma-dflash.gguf", gemma_paths[1], seed=1, n_embd=gemma.n_embd,
                                     layers=(2, gemma.n_layers // 2, gemma.n_layers - 3)),
    }


@pytest.mark.parametrize("target,draft,label,k", [
    ("target", "head", "EAGLE-3 head", "3"), ("target", "head", "EAGLE-3 head", "auto"),
    ("flag_target", "dflash", "DFlash block", "3"), ("flag_target", "dspark", "DFlash block", "3")])
def test_bench_with_a_head_reports_identical_output(files, tmp_path, target, draft, label, k):
    proc = bench(tmp_path, "--target", str(files[target]), "--draft", str(files[draft]), "--max-tokens", "32",
                 "--suite", "code", "--k", k)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"draft {files[draft].name} ({label});" in out
    median = next(line for line in out.splitlines() if line.startswith("median"))
    assert median.split()[-1] == "yes" and " NO" not in out and "mismatch" not in out, out  # every prompt's too


@pytest.mark.parametrize("draft,reader", [("gemma_head", "an EAGLE-3 head"), ("gemma_dflash", "a DFlash drafter")])
def test_bench_refuses_a_head_beside_a_target_without_layer_rows_in_one_line(files, tmp_path, draft, reader):
    proc = bench(tmp_path, "--target", str(files["gemma_target"]), "--draft", str(files[draft]), "--max-tokens", "32")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: {files[draft].name}: llama.cpp does not record the layer inputs of "
                                        f"gemma3 targets, which {reader} reads"]
    assert proc.stdout == ""  # refused before the target was loaded (nothing placed, nothing run)


def test_bench_tree_on_a_target_with_an_mtp_head_and_no_draft(tmp_path, smol_paths):
    """``--proposer tree`` with ``--target`` alone: the target's MTP head drafts the chain and its branches (a made-up
    GLM-4.5 with an MTP block, attention only), and the output equals plain decoding."""
    target = write_glm4moe_mtp(tmp_path / "tiny-glm-mtp.gguf", smol_paths[1])
    proc = bench(tmp_path, "--target", str(target), "--proposer", "tree", "--k", "3", "--max-tokens", "24",
                 "--suite", "code")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tree: " in out and "branch tokens beside the chain" in out, out
    median = next(line for line in out.splitlines() if line.startswith("median"))
    assert median.split()[-1] == "yes" and " NO" not in out and "mismatch" not in out, out
