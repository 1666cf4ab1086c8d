"""The headless benchmark contract and first-run provisioning, through the real launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.lab.prompts import PromptFileError, builtin_suite, load_prompts
from app.models import fileops

from support.greedy import assert_bench_greedy

ROOT = Path(__file__).resolve().parents[2]


def launcher(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


def test_bench_json_contract(tmp_path, smol_paths):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def square(x):"}\n'
                       '{"messages": [{"role": "user", "content": "Name three colours."}]}\n')
    out = tmp_path / "out.json"
    proc = launcher("bench", "--pair", "demo-smollm2", "--prompts-file", str(prompts), "--max-tokens", "24",
                    "--k", "auto", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    for key in ("baseline_tps", "spec_tps", "speedup", "acceptance_rate", "mean_accepted", "identical",
                "mismatches", "c", "v", "bound", "efficiency", "k", "paused", "limit", "per_prompt"):
        assert key in result, key
    assert_bench_greedy(result["identical"], result["mismatches"])
    assert len(result["per_prompt"]) == 2 and result["k"] == "auto"
    # auto K may pause speculation on a busy machine (timings decide); then it must say why
    assert 0 <= result["acceptance_rate"] <= 1 and result["mean_accepted"] >= 1
    assert 0 <= result["paused"] <= 1 and (result["limit"] is not None) == (result["paused"] > 0)
    assert "median" in proc.stdout and "reproduce: python launcher.py bench" in proc.stdout
    gpu = result["gpu"]  # what llama.cpp placed next to the fit estimate (here: a CPU, nothing offloaded)
    assert {"backend", "device", "decision", "target", "draft", "estimated_gpu_bytes", "used_gpu_bytes"} <= gpu.keys()
    for side in (gpu["target"], gpu["draft"]):
        assert {"layers", "layers_placed", "layers_total", "estimated_gpu_bytes", "used_gpu_bytes",
                "used_bytes"} <= side.keys()
        assert side["layers_total"] == 31 and sum(side["used_bytes"].values()) > 0
    assert "[bench] GPU layers:" in proc.stdout and "layers placed on the GPU" in proc.stdout


def test_a_prompt_below_the_guard_is_flagged_with_where_its_time_went(smol_pair):
    """Through the real bench on the demo pair, with a guard no prompt can pass (speed is never asserted): the
    row's ``where`` agrees with the runs' own stats, its parts add up to the gap, the JSON lists the prompt as
    slow, and the table marks it and says where its time went."""
    from dataclasses import replace

    from app.cli.bench import format_table
    from app.engine.loop import GenConfig
    from app.lab.bench import BenchConfig, run_bench
    from app.lab.benchguard import GUARD, PARTS
    from app.lab.prompts import Prompt

    prompt = Prompt(id="colours", category="chat", prompt="The three primary colours are")
    gen = GenConfig(max_tokens=16, k="auto", proposer="draft")
    result = run_bench(smol_pair, [prompt], BenchConfig(gen=gen, warmup=False, guard=1e9))
    row = result.per_prompt[0]
    w = row.where
    assert result.slow == ["colours"] and result.guard == 1e9 and w is not None
    assert w["runs"] == 1 and w["spec_steps"] == row.pooled.steps and w["plain_steps"] >= row.tokens
    assert w["spec_s"] == pytest.approx(row.pooled.t_total, abs=1e-3)
    assert w["probes"] == row.pooled.probe_steps and w["lookup_kept"] == row.pooled.lookup_accepted
    assert w["draft_passes"] == row.pooled.spec_steps and w["catch_up_s"] == pytest.approx(row.pooled.t_sync, abs=1e-3)
    assert sum(w[key] for key, _ in PARTS) == pytest.approx(w["gap_s"], abs=1e-3)
    out = json.loads(json.dumps(result.to_dict()))
    assert out["slow"] == ["colours"] and out["per_prompt"][0]["where"] == w

    table = format_table(result)
    line = next(x for x in table.splitlines() if x.startswith("colours "))
    assert "x!" in line
    assert "below 1000000000.00x plain speed" in table and "\n  colours " in table and " s in all: " in table

    unflagged = replace(result, slow=[], guard=GUARD, per_prompt=[replace(row, where=None)])
    table = format_table(unflagged)
    assert "x!" not in table and "plain speed" not in table

    busy = replace(unflagged, unsteady=["colours"], per_prompt=[replace(row, where=None, unsteady="plain runs went "
                                                                          "1.0-33.0 tokens/s")])
    table = format_table(busy)
    assert "x~" in next(x for x in table.splitlines() if x.startswith("colours "))
    assert "! unsteady timings on 1 of 1 prompts" in table and "\n  colours: plain runs went 1.0-33.0" in table


def test_bench_lookup_with_reference(tmp_path, smol_paths):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a b c d a b c d a b c d a b"}\n')
    out = tmp_path / "out.json"
    proc = launcher("bench", "--prompts-file", str(prompts), "--max-tokens", "16", "--proposer", "lookup",
                    "--reference", "llama-cpp-lookup", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["proposer"] == "lookup" and result["reference"]["kind"] == "llama-cpp-lookup"
    assert result["reference"]["tps"] > 0
    assert_bench_greedy(result["identical"], result["mismatches"])


def test_bench_refuses_a_reference_that_cannot_compare(smol_paths):
    proc = launcher("bench", "--max-tokens", "4", "--proposer", "lookup", "--reference", "bare-spec")
    assert proc.returncode == 2 and "use --proposer draft" in proc.stderr
    proc = launcher("bench", "--max-tokens", "4", "--temperature", "0.7", "--reference", "bare")
    assert proc.returncode == 2 and "greedy" in proc.stderr


def test_bad_prompts_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    proc = launcher("bench", "--prompts-file", str(bad), "--max-tokens", "4")
    assert proc.returncode == 2
    assert "bad.jsonl:2: not valid JSON" in proc.stderr
    with pytest.raises(PromptFileError, match="exactly one of"):
        from app.lab.prompts import parse_prompts

        parse_prompts(['{"prompt": "a", "messages": []}'], "x.jsonl")
    with pytest.raises(PromptFileError, match="cannot read"):
        load_prompts(tmp_path / "missing.jsonl")


def test_builtin_suite_covers_the_categories():
    cats = {p.category for p in builtin_suite()}
    assert cats == {"code", "chat", "summarize", "math", "edit"}
    assert all(p.category == "math" for p in builtin_suite("math"))
    assert {p.category for p in builtin_suite("code, edit")} == {"code", "edit"}  # a comma list


def test_setup_is_instant_on_rerun_and_files_are_verified(smol_paths):
    proc = launcher("setup", "--pair", "demo-smollm2", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pair demo-smollm2" in proc.stdout
    for path in smol_paths:
        assert fileops.is_done(path) and fileops.recorded_sha256(path)
        assert not path.with_name(path.name + ".part").exists()


def test_the_test_command_runs_only_what_it_is_given(smol_paths):
    """`launcher.py test tests/...` runs those files alone (scripts/gpu-check.sh's TESTS); without a path, the
    whole suite (pyproject's testpaths)."""
    proc = launcher("test", "tests/engine/test_loop.py", "-q", "-p", "no:cacheprovider", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = int(proc.stdout.split(" passed")[0].split()[-1])
    assert 0 < ran < 50
    proc = launcher("test", "--co", "-q", "-p", "no:cacheprovider", timeout=300)
    assert proc.returncode == 0 and int(proc.stdout.split(" tests collected")[0].split()[-1]) > 400


def test_a_tampered_file_is_not_trusted(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 100)
    fileops.mark_done(f, fileops.sha256_file(f))
    assert fileops.is_done(f)
    f.write_bytes(b"GGUF" + b"\1" * 100)  # same size, new mtime: the manifest no longer matches
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000))
    assert not fileops.is_done(f)


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    dest = tmp_path / "x.bin"
    with pytest.raises(RuntimeError):
        with fileops.atomic_output(dest) as part:
            part.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert not dest.exists() and not part.exists()


def test_bench_fim_requests_through_the_launcher(tmp_path, coder_path):
    """Two FIM requests (a prompt file mixing an /infill line with an ordinary one) on the Qwen coder alone, lookup
    drafting and the perfect reference, without the suffix rule: the request JSON, every completion equal to plain
    decoding, the reference's drafts all accepted, the reproducing command."""
    prompts = tmp_path / "fim.jsonl"
    prompts.write_text(json.dumps({"id": "area", "input_prefix": "def area(width, height):\n",
                                   "input_suffix": "\n\nprint(area(2, 3))\n",
                                   "input_extra": [{"filename": "util.py", "text": "def half(x):\n    return x / 2\n"}]})
                       + "\n" + json.dumps({"id": "fib", "prompt": "def fib(n):\n"}) + "\n")
    out = tmp_path / "out.json"
    proc = launcher("bench", "--target", str(coder_path), "--proposer", "lookup", "--prompts-file", str(prompts),
                    "--max-tokens", "16", "--reference", "perfect", "--no-stop-at-suffix", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["kind"] == "requests" and result["n_predict"] == 16 and result["proposers"] == ["lookup"]
    assert result["reference"] == "perfect" and result["k_reference"] == 16 and result["stop_at_suffix"] is False
    perfect = result["modes"]["perfect"]
    assert perfect["identical"] and perfect["acceptance_rate"] == 1.0 and perfect["lookup_share"] == 0.0
    assert sum(result["plain_ends"].values()) == 2 and "suffix" not in result["plain_ends"]
    mode = result["modes"]["lookup"]
    assert result["p50_ratio"] == mode["p50_ratio"] == pytest.approx(mode["times"]["p50_s"] / result["plain"]["p50_s"])
    assert [p["id"] for p in result["per_prompt"]] == ["area", "fib"]
    for p in result["per_prompt"]:
        m = p["modes"]["lookup"]
        assert p["prompt_tokens"] > 0 and 0 < p["tokens"] <= 16 and m["median_s"] > 0 and m["ttft_s"] <= m["median_s"]
        assert m["slow"] == (m["speedup"] < result["slow_floor"]) and len(m["steps"][0]) == len(result["step_fields"])
        assert p["modes"]["perfect"]["tokens"] == p["tokens"] and p["modes"]["perfect"]["end"] == p["end"]
    assert_bench_greedy(mode["identical"], [m for m in mode["mismatches"]])
    assert "p50_ratio" in proc.stdout and "[bench] reproduce: " in proc.stdout
    assert "perfect (reference: perfect drafts at K=16, an upper bound, not a drafter)" in proc.stdout
    assert "stop_at_suffix off" in proc.stdout and "--reference perfect --no-stop-at-suffix" in proc.stdout


def test_bench_fim_flags_go_with_completion_requests_only():
    """--reference perfect and --no-stop-at-suffix need FIM prompts, the decoding references do not take them;
    refused before anything loads. By default completion requests stop at the suffix, as /infill."""
    from app.cli import build_parser

    assert build_parser().parse_args(["bench", "--suite", "fim"]).stop_at_suffix is True
    proc = launcher("bench", "--suite", "code", "--reference", "perfect")
    assert proc.returncode == 2 and "--reference perfect replays the plain completions" in proc.stderr
    proc = launcher("bench", "--suite", "code", "--no-stop-at-suffix")
    assert proc.returncode == 2 and "--no-stop-at-suffix is for completion requests" in proc.stderr
    proc = launcher("bench", "--suite", "fim", "--reference", "bare")
    assert proc.returncode == 2 and "their reference is --reference perfect" in proc.stderr


def test_bench_fim_suite_on_a_pair_without_fim_tokens_is_a_clear_error(smol_paths):
    proc = launcher("bench", "--pair", "demo-smollm2", "--suite", "fim", "--max-tokens", "4")
    assert proc.returncode == 2
    assert "fill-in-the-middle prompts" in proc.stderr and "no prefix, suffix, middle tokens" in proc.stderr
