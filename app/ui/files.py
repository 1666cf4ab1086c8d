"""Which files the app's handlers and API may open: files under the data directory and uploads (Gradio's upload
folder); for Import by path also a file named ``.gguf`` anywhere (the user's own model, in Downloads or on
another disk, needs no upload). Any other path, whether it exists or not, gets one fixed message, which depends
only on the name, so a client cannot probe the server's other files (does ``/etc/shadow`` exist, what does it
start with). The command line is not limited: it runs as the user, on the user's own files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from app.engine.errors import BadInput
from gradio.utils import get_upload_folder

from app import paths
from app.models import library
from app.models.catalog import load

REFUSED = ("no such model here: give an installed model id, a catalog id, a .gguf inside Tandem's data folder "
           "(Import takes a .gguf anywhere), or upload the file")
IMPORT_REFUSED = ("Import by path takes a file whose name ends in .gguf (outside Tandem's data folder the name must "
                  "say so): rename the file to .gguf, or upload it")


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


class ImportRefused(BadInput, ValueError):
    """A path Import may look at but cannot take: missing, a folder, unreadable; the message says which."""


def importable(ref: str) -> tuple[Path, bool]:
    """(the file, whether it lies outside :func:`roots`) for Import by path: what :func:`allowed_file` allows,
    or a file named ``.gguf`` anywhere. For those a missing file, a folder or an unreadable file gets its own
    message (ImportRefused); any other path the fixed :data:`IMPORT_REFUSED` (FileRefused)."""
    path = Path(str(ref).strip()).expanduser()
    if not path.is_absolute():
        path = paths.home() / path
    path = Path(os.path.abspath(path))  # ".." resolved by name, links not yet followed
    if not _may_import(path):
        raise FileRefused(IMPORT_REFUSED)
    if not os.path.lexists(path):
        raise ImportRefused(f"no such file: {path}")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ImportRefused(f"{path} is a link to a file that does not exist") from None
    if not _may_import(real):  # a link out of the allowed folders to a file that is not named .gguf
        raise FileRefused(IMPORT_REFUSED)
    if real.is_dir():
        raise ImportRefused(f"{path} is a folder: give the .gguf file inside it")
    if not real.is_file():
        raise ImportRefused(f"{path} is not a regular file")
    if not os.access(real, os.R_OK):
        raise ImportRefused(f"cannot read {path}: permission denied (check the file's permissions)")
    return real, not any(real.is_relative_to(root) for root in roots())


def _may_import(path: Path) -> bool:
    """Inside the data folder or the uploads, any file; elsewhere one named .gguf (by name: nothing is read)."""
    if any(path.is_relative_to(root) for root in [*roots(), Path(os.path.abspath(paths.home()))]):
        return True
    return path.suffix.lower() == ".gguf"


def model_ref(ref: str) -> str:
    """A model reference from a client: an installed or catalog id as it is, a path only if allowed."""
    ref = str(ref or "").strip()
    if not ref:
        raise FileRefused("give a model id, or upload the file")
    cat = load()
    if ref in cat.models or any(rec["id"] == ref for rec in library.installed(cat, with_meta=False)):
        return ref
    return str(allowed_file(ref))


def plot_images(result: Optional[dict], names: Sequence[str]) -> list:
    """A result's plots (``result["files"][name]``) as PIL images, None where one is missing: Gradio serves only
    files in its temp folder and working directory, not the data folder the plots are written to."""
    from PIL import Image

    found = (result or {}).get("files") or {}
    out = []
    for name in names:
        path = found.get(name)
        if path and Path(path).is_file():
            with Image.open(path) as im:
                out.append(im.copy())
        else:
            out.append(None)
    return out
