"""Hostile input, part 3: files the app reads that someone else changed. A registered GGUF overwritten with
fields of the wrong type, a cut or foreign Pair lab database, a cut JSON store, a file that shrinks while it is
copied, what a killed download leaves, an output path that cannot be written, a bad prompts file. Real files on
the real file system, the real SQLite, the real command line in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gguf
import pytest

from app import paths
from app.lab import history as history_mod
from app.lab.history import History
from app.models import compat, library, meta
from app.models.ggufheader import GGUFError
from support.tiny_gguf import BASE, finish

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def gguf_with(path: Path, **fields) -> Path:
    """A tiny whole GGUF whose metadata holds ``fields`` as given (a str, an int, or a list for an array),
    in place of the usual values: the header of a file someone else wrote."""
    w = gguf.GGUFWriter(str(path), arch="llama")
    usual = {"llama.block_count": 2, "llama.context_length": 256, "llama.embedding_length": 8,
             "llama.attention.head_count": 2, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default",
             "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    for key, value in {**usual, **fields}.items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_uint32(key, value)
    w.add_token_list(BASE)
    return finish(w, path, len(BASE))


HOSTILE = [  # (field, value, words in the one-line error)
    ("tokenizer.ggml.bos_token_id", "x", "tokenizer.ggml.bos_token_id is the string 'x', not an integer"),
    ("general.alignment", "abc", "general.alignment is the string 'abc', not an integer"),
    ("tokenizer.ggml.model", ["gpt2", "llama"], "tokenizer.ggml.model is an array of 2 values, not a string"),
    ("tokenizer.ggml.add_bos_token", "yes", "tokenizer.ggml.add_bos_token is the string 'yes', not a boolean"),
    ("llama.block_count", "two", "llama.block_count is the string 'two', not an integer"),
    ("llama.block_count", 4_000_000_000, "llama.block_count is 4000000000"),
    ("general.alignment", 48, "invalid general.alignment 48"),
]


@pytest.mark.parametrize("field, value, words", HOSTILE)
def test_hostile_metadata_is_one_error_naming_the_file_and_field(home, tmp_path, field, value, words):
    bad = gguf_with(tmp_path / "bad.gguf", **{field: value})
    with pytest.raises(GGUFError) as err:  # once: ValueError / TypeError from int(), a traceback
        meta.read(bad)
    assert words in str(err.value) and "bad.gguf" in str(err.value)
    for copy in (False, True):
        with pytest.raises(library.LibraryError, match="cannot import bad.gguf"):
            library.import_gguf(bad, copy=copy)
    with pytest.raises(compat.CompatError, match="bad.gguf"):
        compat.check_pair(str(gguf_with(tmp_path / "good.gguf")), str(bad), remember=False)


def test_a_registered_model_overwritten_later_is_listed_unusable(home, tmp_path):
    good = gguf_with(tmp_path / "later.gguf")
    library.import_gguf(good)
    gguf_with(good, **{"tokenizer.ggml.bos_token_id": "x"})  # overwritten in place after it was registered
    recs = {r["id"]: r for r in library.installed()}
    assert "later.gguf" in recs["later"]["error"] and "bos_token_id" in recs["later"]["error"]

    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1")
    out = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "models", "list"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr  # once: a traceback
    assert "Traceback" not in out.stderr and "bos_token_id" in out.stdout


# --- the Pair lab database ----------------------------------------------------------------------------

def _history_with_runs(path: Path, n: int = 40) -> None:
    hist = History(path)
    for i in range(n):
        run = hist.start("pair", "t.gguf", {"quick": True, "pad": "x" * 2000}, {"fingerprint": "f"})
        hist.finish(run, {"cells": [{"draft": "d", "k": 2, "speedup": 1.5}] * 20, "pad": "y" * 4000})


@pytest.mark.parametrize("damage", ["cut in half", "not a database"])
def test_a_corrupt_history_is_moved_aside_and_started_fresh(home, damage, capfd):
    db = home / "pairlab.sqlite"
    home.mkdir(parents=True)
    if damage == "cut in half":
        _history_with_runs(db)
        raw = db.read_bytes()
        db.write_bytes(raw[:len(raw) // 2])
    else:
        db.write_bytes(b"this is not an SQLite database\n" * 200)
    history_mod._checked.clear()  # a fresh process
    hist = History()  # once: "database disk image is malformed" (or "file is not a database"), no file named
    assert hist.notice and "started fresh" in hist.notice and "pairlab.sqlite" in hist.notice
    moved = list(home.glob("pairlab.sqlite.corrupt-*"))
    assert len(moved) == 1 and moved[0].stat().st_size > 0
    assert hist.list() == [] and hist.start("p", "t", {}, {}) == 1
    assert "pairlab.sqlite is unreadable" in capfd.readouterr().err
    assert History().notice == hist.notice  # the check runs once per process


def test_a_huge_run_id_is_no_run(home):
    hist = History()
    assert hist.get(99999999999999999999999) is None and hist.get(-1) is None  # once: OverflowError


# --- JSON stores ---------------------------------------------------------------------------------------

def test_a_cut_library_json_is_restored_from_its_backup(home, tmp_path, capfd):
    files = [gguf_with(tmp_path / f"m{i}.gguf") for i in range(7)]
    for f in files:
        library.import_gguf(f)
    lib = library.library_file()
    assert (lib.parent / "library.json.bak").read_bytes() == lib.read_bytes()
    lib.write_bytes(lib.read_bytes()[:-20])  # its last 20 bytes cut
    assert len(library.installed(with_meta=False)) == 7  # once: silently {} ...
    library.import_gguf(gguf_with(tmp_path / "new.gguf"))
    assert len(library._read()["models"]) == 8  # ... and the next import left 1 record of 7
    err = capfd.readouterr().err
    assert "library.json is unreadable" in err and "restored library.json from library.json.bak" in err
    assert len(list(lib.parent.glob("library.json.corrupt-*"))) == 1


def test_records_that_are_not_model_entries_are_left_out(home, tmp_path, capfd):
    library.import_gguf(gguf_with(tmp_path / "fine.gguf"))
    data = library._read()
    data["models"].update({"nul": {"path": "a\x00b"}, "nopath": {"id": "x"}, "list": [1, 2]})
    paths.write_json(library.library_file(), data)
    assert [r["id"] for r in library.installed()] == ["fine"]  # once: ValueError (embedded null byte)
    assert "model record 'nul' has no file path" in capfd.readouterr().err


def test_a_cut_store_without_backup_is_kept_aside_not_overwritten(home, tmp_path, capfd):
    from app.lab import tuned

    home.mkdir(parents=True)
    tuned.tuned_path().write_text('{"pair": {"k": 3, "draft": "x"}, "other": {"k"', encoding="utf-8")
    assert paths.read_json(tuned.tuned_path()) == {}
    kept = list(home.glob("tuned*.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text().startswith('{"pair"')  # the user's data is still there
    assert "no good backup" in capfd.readouterr().err
    paths.write_json(tuned.tuned_path(), {"a": 1})
    assert paths.read_json(tuned.tuned_path()) == {"a": 1} and not list(home.glob("*.tmp*"))


def test_the_app_start_check_names_each_bad_store(home, tmp_path):
    from app.lab.stores import check_stores

    good = gguf_with(tmp_path / "g.gguf")
    library.import_gguf(good)
    gguf_with(good, **{"general.alignment": "abc"})
    lib = library.library_file()
    lib.write_bytes(lib.read_bytes()[:-20])
    (home / "pairlab.sqlite").write_bytes(os.urandom(4096))
    history_mod._checked.clear()
    lines = check_stores()  # once: the start failed on the database, the model list on the header
    text = "\n".join(lines)
    assert "library.json is unreadable" in text and "pairlab.sqlite is unreadable" in text
    assert "model g cannot be used: g.gguf: metadata field general.alignment" in text
    assert all("\n" not in line for line in lines)


# --- copies, downloads and outputs ---------------------------------------------------------------------

def test_import_copy_refuses_a_file_that_shrank_while_copied(home, tmp_path, monkeypatch):
    src = gguf_with(tmp_path / "growing.gguf")
    real_copy = library.shutil.copyfile

    def copy_while_another_program_cuts_it(a, b):
        with open(a, "r+b") as f:  # the writer that was still busy with it truncates it meanwhile
            f.truncate(os.path.getsize(a) - 1000)
        return real_copy(a, b)

    monkeypatch.setattr(library.shutil, "copyfile", copy_while_another_program_cuts_it)
    with pytest.raises(library.LibraryError, match="changed while it was copied"):
        library.import_gguf(src, copy=True)  # once: registered, 1000 bytes short
    assert library.installed(with_meta=False) == [] or all(
        "growing" not in r["id"] for r in library.installed(with_meta=False))
    assert not list((home / "models").glob("growing*"))


def test_what_a_killed_download_left_is_cleaned(home):
    old = paths.downloads_dir() / "tmpa1b2c3"  # the old layout: downloads/tmp*/...whl
    old.mkdir(parents=True)
    (old / "part.whl").write_bytes(b"w" * 1000)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    dead = paths.sub("downloads/tmp") / "pid999999999-x"  # a process that is gone
    dead.mkdir()
    (dead / "part.whl").write_bytes(b"w")
    live = paths.download_temp()  # this process's own, in use
    fresh_old_layout = paths.downloads_dir() / "tmpfresh"
    fresh_old_layout.mkdir()
    removed = paths.clean_stale_downloads()
    assert set(removed) == {old, dead}
    assert live.is_dir() and fresh_old_layout.is_dir() and live.parent == paths.downloads_dir() / "tmp"


def test_an_output_path_is_checked_before_the_run(tmp_path):
    ok = paths.check_writable(tmp_path / "out.json")
    assert ok == tmp_path / "out.json" and not ok.exists()  # nothing created
    for bad, words in ((tmp_path, "is a folder"), (tmp_path / "nope" / "out.json", "does not exist"),
                       (Path("/proc/self/out.json"), "cannot write")):
        with pytest.raises(paths.OutputPathError, match=words):
            paths.check_writable(bad)


def test_a_pull_of_a_path_outside_the_hub_is_refused(home):
    from app.models.download import DownloadError, check_repo_file, pull

    for repo, name in (("../x", "f.gguf"), ("owner/name", "../../x.gguf"), ("owner/name", "f"),
                       ("owner/..", "f.gguf"), ("/etc", "passwd.gguf"), ("a/b", "/abs.gguf")):
        with pytest.raises(DownloadError):
            check_repo_file(repo, name)
    with pytest.raises(DownloadError, match="not a Hub repository id"):
        pull("../x", "f")  # refused before any network
    check_repo_file("bartowski/SmolLM2-135M-Instruct-GGUF", "sub/SmolLM2-Q4_K_M.gguf")


def test_a_prompts_file_with_bad_text_names_the_line(tmp_path):
    from app.lab.prompts import PromptFileError, load_prompts

    good = '{"prompt": "Hello"}\n'
    for body, words in ((good.encode() + b'{"prompt": "caf\xe9"}\n', r"\.jsonl:2: not UTF-8 text \(byte 0xe9"),
                        (good.encode() + b'{"prompt": "x\\ud800y"}\n', r"\.jsonl:2: holds a lone surrogate"),
                        (b'{"messages": [{"role": "user", "content": "\\udfff"}]}\n', r"\.jsonl:1: holds a lone")):
        f = tmp_path / "p.jsonl"
        f.write_bytes(body)
        with pytest.raises(PromptFileError, match=words):  # once: UnicodeDecodeError / UnicodeEncodeError
            load_prompts(f)
    f.write_text(good, encoding="utf-8")
    assert load_prompts(f)[0].prompt == "Hello"
