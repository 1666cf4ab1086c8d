"""A catalog the user edited badly: an empty or non-TOML ``models.toml``, a 5000-character file name, a float
context, a NUL in a file name, missing keys. Each bad entry is one line naming the entry and the value and is
left out; the default pair is never swapped for another (which would start another pair's download), and
``bench``/``tune`` end with one error line, not a traceback. The real command line runs from a copy of the
program whose ``models.toml`` is the edited one, on an empty scratch data folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.models import catalog

pytestmark = pytest.mark.hostile  # bad input: one clear line per bad entry, nothing fetched in its place

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "models.toml").read_text(encoding="utf-8")
TARGET = "[models.smollm2-135m-instruct-f32]"  # the default pair's target


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """A copy of the program (launcher.py, app/, models.toml) that runs in this checkout's environment."""
    root = tmp_path_factory.mktemp("program")
    shutil.copy2(ROOT / "launcher.py", root / "launcher.py")
    shutil.copytree(ROOT / "app", root / "app", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def run(program: Path, home: Path, catalog_text: str, *args: str) -> subprocess.CompletedProcess:
    (program / "models.toml").write_text(catalog_text, encoding="utf-8")
    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1", TANDEM_VENV=sys.prefix)
    return subprocess.run([sys.executable, str(program / "launcher.py"), *args], cwd=program, env=env,
                          capture_output=True, text=True, timeout=300)


def with_target(**fields: str) -> str:
    """The catalog with fields of the default pair's target replaced (TOML text as given)."""
    head, rest = TEXT.split(TARGET + "\n", 1)
    body, tail = rest.split("\n\n", 1)
    lines = [line for line in body.splitlines() if line.split(" = ")[0] not in fields]
    lines += [f"{key} = {value}" for key, value in fields.items() if value is not None]
    return head + TARGET + "\n" + "\n".join(lines) + "\n\n" + tail


def error_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "StopIteration" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def warnings(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "models.toml: " in line and "entry left out" in line]


def nothing_fetched(home: Path) -> None:
    for folder in ("models", "downloads"):
        found = [p.name for p in (home / folder).rglob("*") if p.is_file()] if (home / folder).exists() else []
        assert not found, found


@pytest.mark.parametrize("text, words", [("", "models.toml has no pair to use"),
                                         ("this is [not toml", "not a readable TOML file")])
def test_an_empty_or_broken_catalog_is_one_line_for_bench_and_tune(program, tmp_path, text, words):
    for command in (["bench", "--max-tokens", "4"], ["tune", "--quick", "--max-tokens", "4"]):
        proc = run(program, tmp_path / "home", text, *command)
        error_line(proc, words)  # once: StopIteration and a traceback
    nothing_fetched(tmp_path / "home")


def test_a_float_context_in_the_default_pair_stops_instead_of_fetching_another_pair(program, tmp_path):
    home = tmp_path / "home"
    proc = run(program, home, with_target(context="8192.0"), "bench", "--max-tokens", "4")
    line = error_line(proc, "the default pair cannot be used", "pairs.demo-smollm2",
                      "models.smollm2-135m-instruct-f32: field 'context' must be a non-negative integer (got 8192.0)",
                      "no other pair was chosen")
    assert len(line) < 600
    said = warnings(proc)
    assert [w.split("models.toml: ")[1].split(":")[0] for w in said] == ["models.smollm2-135m-instruct-f32",
                                                                          "pairs.demo-smollm2"]
    nothing_fetched(home)  # once: the first catalog pair instead, and a 241 MB download


@pytest.mark.parametrize("fields, words", [
    ({"file": '"' + "m" * 4995 + '.gguf"'}, "field 'file' is 5000 characters long: a file name holds at most 255"),
    ({"file": '"SmolLM2\\u0000.gguf"'}, "field 'file' holds a control character such as NUL (got 'SmolLM2\\x00"),
    ({"name": None}, "field 'name' is required"),
    ({"file": None}, "field 'file' is required"),
])
def test_each_bad_entry_is_one_short_line_and_the_rest_still_works(program, tmp_path, fields, words):
    home = tmp_path / "home"
    text = with_target(**fields)
    proc = run(program, home, text, "models", "list")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    said = warnings(proc)
    assert len(said) == 2 and words in said[0] and "models.smollm2-135m-instruct-f32" in said[0], said
    assert all(len(w) < 600 for w in said)  # the value is shown short, never 5000 characters
    assert "demo-gemma3" in proc.stdout and "demo-smollm2 " not in proc.stdout
    error_line(run(program, home, text, "bench", "--max-tokens", "4"), "the default pair cannot be used")
    nothing_fetched(home)


def test_entries_are_checked_when_loaded(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text(with_target(context="8192.0"), encoding="utf-8")
    cat = catalog.load(path)
    assert "demo-smollm2" not in cat.pairs and "demo-gemma3" in cat.pairs
    with pytest.raises(catalog.CatalogError, match="the default pair cannot be used"):
        cat.default_pair()
    path.write_bytes(b"\xff\xfe not text")
    with pytest.raises(catalog.CatalogError, match="not a readable TOML file"):
        catalog.load(path).default_pair()
    path.write_text('[models."a\\u0000b"]\nname = "x"\n', encoding="utf-8")
    assert "an id must be 1 to 100 characters with no control characters" in catalog.load(path).errors[0]
    assert catalog.load().errors == [] and catalog.load().default_pair().id == "demo-smollm2"
