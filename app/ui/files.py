"""Which files the app's handlers and API may open: files under the data directory and uploads (Gradio's upload
folder). Any other path, whether it exists or not, gets one fixed message, so a client cannot probe the
server's files (does ``/etc/shadow`` exist, what does it start with). The command line is not limited: it runs
as the user, on the user's own files."""

from __future__ import annotations

from pathlib import Path

from app.engine.errors import BadInput
from gradio.utils import get_upload_folder

from app import paths
from app.models import library
from app.models.catalog import load

REFUSED = ("no such model here: give an installed model id, a catalog id, a .gguf inside Tandem's data folder, "
           "or upload the file")


class FileRefused(BadInput, ValueError):
    """A path the app will not open for a client; the message is always :data:`REFUSED`."""


def roots() -> list[Path]:
    """The folders a client may name files in: the data directory and Gradio's upload folder."""
    return [paths.home().resolve(), Path(get_upload_folder()).resolve()]


def allowed_file(ref: str) -> Path:
    """The file ``ref`` names (a relative path is taken inside the data directory), resolved through links,
    if it is a file in one of :func:`roots`; else FileRefused with the fixed message."""
    path = Path(str(ref).strip()).expanduser()
    if not path.is_absolute():
        path = paths.home() / path
    try:
        path = path.resolve(strict=True)
        ok = path.is_file() and any(path.is_relative_to(root) for root in roots())
    except (OSError, RuntimeError, ValueError):
        ok = False
    if not ok:
        raise FileRefused(REFUSED)
    return path


def model_ref(ref: str) -> str:
    """A model reference from a client: an installed or catalog id as it is, a path only if allowed."""
    ref = str(ref or "").strip()
    if not ref:
        raise FileRefused("give a model id, or upload the file")
    cat = load()
    if ref in cat.models or any(rec["id"] == ref for rec in library.installed(cat, with_meta=False)):
        return ref
    return str(allowed_file(ref))
