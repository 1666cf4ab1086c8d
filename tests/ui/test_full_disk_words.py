"""The app on a full disk and on files that are not models: the UI's handlers say a full disk in the command
line's words (one function for both, no errno, no sqlite text, no traceback), the browser's key file is never
left empty, and an Import error never quotes the bytes of the file it was given. The full disk is real: a
1 MiB tmpfs as the data folder, filled (the tests are skipped where it cannot be mounted)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import gradio as gr
import pytest

from app import errors
from app.lab.history import History
from app.models import library
from app.ui import keep
from app.ui.tabs import bench as bench_tab
from app.ui.tabs import models as models_tab
from support.tiny_gguf import write_tiny

pytestmark = pytest.mark.hostile  # a fault: a full disk, a file that is not a model

RAW = ("Errno", "OSError", "database or disk is full", "Traceback", "No space left")


@pytest.fixture
def tiny_disk(tmp_path, monkeypatch):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    monkeypatch.setenv("TANDEM_HOME", str(disk))
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def in_words(message: str) -> None:
    assert "the disk is full" in message and "free some space" in message, message
    for raw in RAW:
        assert raw not in message, message


def test_the_ui_says_a_full_disk_as_the_command_line_does(tiny_disk, tmp_path, capfd):
    kept = library.import_gguf(write_tiny(tmp_path / "kept.gguf"))  # registered where it is
    write_tiny(tiny_disk / "later.gguf")
    hist = History(tiny_disk / "pairlab.sqlite")
    run_id = hist.start("p", "t", {}, {"fingerprint": "x"})
    fill(tiny_disk)

    msg, _ = models_tab.do_delete(kept["id"])  # once: OSError escaped the handler, a console traceback
    in_words(msg)
    assert kept["id"] in {r["id"] for r in library.installed(with_meta=False)}  # nothing lost
    msg, _ = models_tab.do_import("later.gguf", None)
    in_words(msg)
    with pytest.raises(gr.Error) as shown:  # once: "database or disk is full" and a traceback
        bench_tab.delete_run(lambda: hist, str(run_id))
    in_words(shown.value.message)
    try:
        hist.finish(run_id, {"cells": [], "note": "x" * 100_000})
    except Exception as exc:  # noqa: BLE001 - whatever sqlite raises on a full disk
        assert errors.ui_message(exc) == errors.cli_line(exc)  # one wording for both front ends
        in_words(errors.ui_message(exc))
    else:
        pytest.fail("a 100 kB row fitted on a full 1 MiB disk")
    assert "Traceback" not in capfd.readouterr().err


def test_the_browser_key_is_never_left_empty(tiny_disk):
    key_file = tiny_disk / "ui-state-key"
    filler = fill(tiny_disk)
    first = keep.secret()  # once: an empty key file, written with nothing in it
    assert len(first) == 32 and (not key_file.exists() or key_file.read_text() == first)
    filler.unlink()
    for damaged in (b"", b"\xff\xfe\x00 not a key", b"short"):
        key_file.write_bytes(damaged)
        key = keep.secret()
        assert len(key) == 32 and key_file.read_text() == key
    assert keep.secret() == key  # a good key is kept


def test_an_import_error_never_quotes_the_file(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    key = keep.secret()  # files in the data folder whose bytes must not come back in a message
    (home / "notes.json").write_text('{"secret": "hunter2"}')
    for name, content in (("ui-state-key", key), ("notes.json", '{"secret": "hunter2"}')):
        msg, _ = models_tab.do_import(name, None)  # once: "not a GGUF file (starts with b'3f2a', ...)"
        assert msg.startswith("error: ") and "not a GGUF file" in msg, msg
        assert "b'" not in msg and f"{content[:4]}'" not in msg and content[:4] not in msg.split(name)[-1], msg
