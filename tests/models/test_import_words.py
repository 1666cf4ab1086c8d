"""What Import says about a file that is not a GGUF (how it starts, in words, never a bytes repr; the data
folder's own files never quoted), which paths Import by path takes (a .gguf anywhere), and the progress step
a figure belongs to (``fileops.stage``)."""

from __future__ import annotations

import pytest

from app.models import fileops, library
from app.ui.files import IMPORT_REFUSED, FileRefused, ImportRefused, importable
from support.tiny_gguf import write_tiny


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.mark.parametrize("content, words", [
    (b"hello, a text file", 'x.bin is not a GGUF file: it starts with "hell", a GGUF model file starts with "GGUF"'),
    (b"\x89PNG\r\n\x1a\n", "x.bin is not a GGUF file: it starts with the bytes 89 50 4E 47"),
    (b"", "x.bin is not a GGUF file: it is empty"),
])
def test_a_file_that_is_not_a_gguf_is_named_by_how_it_starts(home, tmp_path, content, words):
    bad = tmp_path / "outside" / "x.bin"
    bad.parent.mkdir()
    bad.write_bytes(content)
    with pytest.raises(library.LibraryError) as err:
        library.import_gguf(bad)
    assert words in str(err.value) and "b'" not in str(err.value), str(err.value)


def test_the_data_folders_own_files_are_never_quoted(home):
    secret = home / "notes.json"
    secret.write_text('{"token": "hunter2"}')
    with pytest.raises(library.LibraryError) as err:
        library.import_gguf(secret)
    assert "not a GGUF file" in str(err.value) and '{"to' not in str(err.value), str(err.value)


def test_import_by_path_takes_a_gguf_anywhere_and_refuses_other_names_by_name_alone(home, tmp_path):
    good = write_tiny(tmp_path / "elsewhere.gguf")
    assert importable(str(good)) == (good.resolve(), True)
    with pytest.raises(ImportRefused, match="no such file"):
        importable(str(tmp_path / "missing.gguf"))
    for path in (tmp_path / "notes.bin", "/nonexistent/notes.bin"):
        with pytest.raises(FileRefused) as err:
            importable(str(path))
        assert str(err.value) == IMPORT_REFUSED


def test_a_progress_figure_names_the_step_it_counts(tmp_path):
    seen = []
    with fileops.ProgressBar("assembling x.gguf", 10, lambda d, t: seen.append((fileops.stage(), d))) as bar:
        bar.update(5)
        with fileops.staged("downloading y.gguf"):
            bar.update(5)
    assert seen == [("assembling x.gguf", 5), ("downloading y.gguf", 10)] and fileops.stage() == ""
