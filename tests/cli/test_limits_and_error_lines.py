"""Bounded settings at every door (UI, API, command line), and the command line's one error path.

Settings that once grew the process without bound are sent from a child process whose address space is capped
(RLIMIT_AS), so a regression fails the test with a MemoryError instead of taking the machine down."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.engine.loop import GenConfig
from app.service import settings as S

ROOT = Path(__file__).resolve().parents[2]
CAP = 4 << 30  # bytes of address space for a capped child: plenty for the demo pair, far from a billion Ks


def capped(args: list[str], home: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in the repository with its address space capped at CAP."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    env = dict(os.environ, TANDEM_QUIET="1")
    if home is not None:
        env["TANDEM_HOME"] = str(home)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit)


def launcher(*args: str, home: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return capped([str(ROOT / "launcher.py"), *args], home, timeout)


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The run failed with exit 2 and one 'error: …' line naming ``words``, and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def home(tmp_path, smol_paths):
    """A fresh TANDEM_HOME that sees the demo models through a link (nothing is fetched)."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "models").symlink_to(Path(smol_paths[0]).parent, target_is_directory=True)
    return tmp_path / "home"


# --- the ranges, checked the same way at every door ----------------------------------------------------------

def test_every_door_names_the_setting_and_its_range():
    msg = "k_max must be between 1 and 64 (got 1000000000)"
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        GenConfig(k_max=10**9).validate()
    with pytest.raises(S.SettingsError, match=r"k_max must be between 1 and 64 \(got 1000000000\)"):
        S.resolve({"k_max": 10**9})
    bad = {"k": 65, "max_tokens": 10**12, "top_k": -1, "temperature": "nan", "top_p": 0, "min_p": 1,
           "repeat_penalty": 0, "repeat_last_n": -5, "p_min": 1.5, "seed": 2**70}
    for key, value in bad.items():
        with pytest.raises(S.SettingsError, match=key):
            S.resolve({key: value})
    assert S.resolve({"k": 64, "k_max": 64, "seed": -1, "temperature": 5})["k"] == 64
    with pytest.raises(S.SettingsError, match="k_max must be between 1 and 64"):
        S.resolve({"k_max": 0})  # once silently raised to 1


PARSE = textwrap.dedent("""
    import contextlib, io, json, sys
    from app.cli import build_parser
    from app.lab.tune import parse_ks

    out = {}
    for text in ("1-1000000000", "1," * 1000, "1-3,64,AUTO"):
        try:
            out[text[:12]] = parse_ks(text)
        except ValueError as exc:
            out[text[:12]] = str(exc)
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                build_parser().parse_args(argv)
            out[" ".join(argv)] = "accepted"
        except SystemExit as exc:
            out[" ".join(argv)] = f"exit {exc.code}: {err.getvalue().strip().splitlines()[-1]}"
    print(json.dumps(out))
""")
ARGV = {
    "bench --k-max 1000000000": "k_max must be between 1 and 64 (got 1000000000)",
    "bench --k 100": "k must be between 1 and 64 (got 100)",
    "bench --ctx 99999999999": "ctx must be between 32 and",
    "tune --k 1-1000000000": "K must be between 1 and 64 (got 1000000000)",
    "tune --repeats 1000000": "repeats must be between 1 and 100",
    "models recommend --vram -3": "vram must be between 0 and",
}


def test_k_lists_and_command_lines_are_bounded_in_a_memory_capped_process():
    proc = capped(["-c", PARSE, json.dumps([argv.split() for argv in ARGV])])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["1-1000000000"] == "K must be between 1 and 64 (got 1000000000)"
    assert "at most 512" in out["1,1,1,1,1,1,"]
    assert out["1-3,64,AUTO"] == [1, 2, 3, 64, "auto"]
    for argv, words in ARGV.items():
        assert out[argv].startswith("exit 2: ") and words in out[argv], out[argv]


# --- the requests that once grew the process until the OOM killer ended it ---------------------------------

CHILD = textwrap.dedent("""
    import json, sys
    import gradio as gr
    from app.engine.llama.backend import LoadOptions
    from app.lab.lab import LabRequest, plan
    from app.engine.loop import GenConfig
    from app.engine.pair import Pair
    from app.models.provision import ensure_pair
    from app.ui import api
    from app.service.state import AppState

    _, target, draft = ensure_pair("demo-smollm2")
    pair = Pair.load(target, draft, LoadOptions(n_ctx=256))
    out = {}
    for name, settings in (("k_max", {"k_max": 10**9, "max_tokens": 4}), ("k", {"k": 10**9, "max_tokens": 4})):
        try:
            list(api.api_chat(AppState(pair=pair), "Hi", [], settings, "s"))  # the /chat endpoint's handler
            out[name] = "answered"
        except gr.Error as exc:
            out[name] = exc.message
    try:  # the engine's own door
        list(pair.generate(pair.chat_prompt([{"role": "user", "content": "Hi"}]), GenConfig(max_tokens=4, k_max=10**9)))
        out["engine"] = "answered"
    except ValueError as exc:
        out["engine"] = str(exc)
    try:  # the /tune endpoint plans with the same request
        plan(pair, LabRequest(drafts="lookup", ks="1-1000000000"))
        out["tune"] = "planned"
    except ValueError as exc:
        out["tune"] = str(exc)
    print(json.dumps(out))
""")


def test_unbounded_settings_are_refused_in_a_memory_capped_process(smol_paths):
    proc = capped(["-c", CHILD])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["k_max"] == out["engine"] == "k_max must be between 1 and 64 (got 1000000000)"
    assert out["k"] == "k must be between 1 and 64 (got 1000000000)"
    assert out["tune"] == "K must be between 1 and 64 (got 1000000000)"


@pytest.mark.parametrize("argv, words", [
    (["bench", "--pair", "demo-smollm2", "--k-max", "1000000000", "--max-tokens", "4"], ["k_max", "1 and 64"]),
    (["tune", "--pair", "demo-smollm2", "--drafts", "lookup", "--k", "1-1000000000"], ["K must be between"]),
])
def test_unbounded_command_lines_are_refused_in_a_memory_capped_process(argv, words, home):
    proc = launcher(*argv, home=home)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert all(w in proc.stderr for w in words), proc.stderr[-3000:]


# --- one error path for the command line -----------------------------------------------------------------

def test_known_errors_print_one_line_and_exit_2(home, tmp_path):
    one_error_line(launcher("bench", "--pair", "nosuch", home=home), "unknown pair 'nosuch'", "—")
    notgguf = tmp_path / "notes.gguf"
    notgguf.write_text("just some text, not a model\n")
    one_error_line(launcher("models", "derive", str(notgguf), home=home), "not a GGUF file", "—")


def test_bench_reports_the_prompts_that_fit_and_marks_the_one_that_does_not(home, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "short", "prompt": "def square(x):"}) + "\n" +
                       json.dumps({"id": "long", "prompt": "word " * 2000}) + "\n")
    out = tmp_path / "out.json"
    proc = launcher("bench", "--pair", "demo-smollm2", "--prompts-file", str(prompts), "--ctx", "256",
                    "--max-tokens", "8", "--json", str(out), home=home)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    result = json.loads(out.read_text())
    assert [p["id"] for p in result["per_prompt"]] == ["short"] and result["speedup"]
    assert [s["id"] for s in result["skipped"]] == ["long"] and "context holds 256" in result["skipped"][0]["error"]
    assert "skipped: prompt long: the prompt is" in proc.stdout


def test_error_lines_say_what_to_do_and_bugs_keep_their_traceback():
    from app.errors import cli_line as explain
    from app.models.fileops import DiskFullError

    full = OSError(28, "No space left on device")
    assert explain(full).startswith("the disk is full") and "free some space" in explain(full)
    assert explain(sqlite3.OperationalError("database or disk is full")).startswith("the disk is full")
    try:
        try:
            raise full
        except OSError as inner:
            raise RuntimeError("could not write the report") from inner
    except RuntimeError as outer:
        assert explain(outer).startswith("the disk is full")  # found through the cause
    assert "free some space" in explain(DiskFullError("not enough disk space"))
    assert explain(KeyError("x")) is None and explain(ZeroDivisionError()) is None  # bugs: a traceback


# --- a real full disk (a 1 MiB tmpfs) ------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> None:
    with open(disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_setup_on_a_full_disk_says_so(tiny_disk):
    one_error_line(launcher("setup", "--pair", "demo-smollm2", home=tiny_disk), "the disk is full", "free some space")


def test_tune_on_a_full_disk_says_so(tiny_disk, smol_paths):
    (tiny_disk / "models").symlink_to(Path(smol_paths[0]).parent, target_is_directory=True)
    fill(tiny_disk)
    proc = launcher("tune", "--pair", "demo-smollm2", "--drafts", "lookup", "--k", "2", "--quick", "--suite", "code",
                    "--max-tokens", "4", "--ctx", "512", "--no-save", home=tiny_disk)
    one_error_line(proc, "the disk is full")


def test_quantizing_onto_a_full_disk_names_the_disk(tiny_disk, smol_paths, monkeypatch):
    from app.errors import cli_line as explain
    from app.models import derive, fileops

    monkeypatch.setattr(fileops, "check_free_space", lambda *a, **k: None)  # past the early check, into llama.cpp
    with pytest.raises(fileops.DiskFullError, match="llama_model_quantize failed.*the disk is full") as err:
        derive.quantize(Path(smol_paths[1]), tiny_disk / "draft.gguf", "Q4_0")
    assert explain(err.value).startswith("the disk is full")
    assert not list(tiny_disk.iterdir())  # no half file left behind
