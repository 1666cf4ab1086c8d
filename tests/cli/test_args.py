"""Hostile command-line inputs (issue: hold under hostile input, round 3): each one ``error:`` line, exit 2, no
traceback and no usage dump, before any model is loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict | None = None, home: Path | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, TANDEM_QUIET="1", **(env or {}))
    if home is not None:
        full["TANDEM_HOME"] = str(home)
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=120)


def one_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "usage:" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("command", ["serve", "ui", "worker"])
def test_port_out_of_range(command):
    one_line(run([command, "--port", "70000"]), "port", "65535", "70000")


def test_rpc_timeout_not_a_number(tmp_path):
    one_line(run(["tune", "--history"], env={"TANDEM_RPC_TIMEOUT": "abc"}, home=tmp_path),
             "TANDEM_RPC_TIMEOUT", "abc")


def test_max_body_not_a_number():
    one_line(run(["serve", "--max-body-mib", "lots"]), "max-body-mib", "lots")


@pytest.mark.parametrize("command", ["serve", "ui"])
@pytest.mark.parametrize("value", ["-1", "lots", "99999999"])
def test_cache_ram_out_of_range(command, value):
    one_line(run([command, "--cache-ram", value]), "cache-ram", value)


def test_prompts_file_with_a_lone_surrogate(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a \\ud800 b"}\n', encoding="utf-8")
    one_line(run(["bench", "--prompts-file", str(path)], home=tmp_path / "home"), "prompts.jsonl")


@pytest.mark.parametrize("flag", ["--show", "--delete"])
def test_huge_run_id(tmp_path, flag):
    one_line(run(["tune", flag, "99999999999999999999999"], home=tmp_path), "run id")


def test_huge_run_id_in_compare(tmp_path):
    one_line(run(["tune", "--compare", "1,99999999999999999999999"], home=tmp_path), "run id")


def test_pull_with_a_path_for_a_repository(tmp_path):
    one_line(run(["models", "pull", "../x", "f"], home=tmp_path), "../x")


def test_unreadable_api_key_file(tmp_path):
    one_line(run(["serve", "--api-key-file", str(tmp_path / "missing")]), "API key file")


@pytest.mark.parametrize("command", ["serve", "ui"])
@pytest.mark.parametrize("key", ["   ", ""])
def test_blank_api_key(command, key):
    # a key no request could match: refused before anything loads, not served as if it protected /v1
    one_line(run([command, "--no-browser", "--api-key", key] if command == "ui" else [command, "--api-key", key]),
             "--api-key", "blank")


def test_worker_with_a_bad_device_exits_at_once():
    proc = run(["worker", "--device", "NOPE"])
    one_line(proc, "NOPE")
    assert "RPC worker on" not in proc.stdout


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_json_output_to_a_missing_folder_fails_before_the_run(tmp_path, command):
    out = tmp_path / "no-such-folder" / "result.json"
    one_line(run([command, "--json", str(out)], home=tmp_path / "home"), "no-such-folder", "does not exist")
