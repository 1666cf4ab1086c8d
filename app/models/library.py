"""The library: installed models (catalog files, Hub downloads, imported and derived files) with metadata from
their GGUF headers, and the pairs the user has checked. Kept in ``library.json`` under the data directory."""

from __future__ import annotations

import os
import re
import shutil
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Optional

from app.engine.errors import TandemError
from app import paths
from app.models import fileops, ggufheader, meta
from app.models.catalog import Catalog, load
from app.models.ggufheader import GGUFError


class LibraryError(TandemError, ValueError):
    """A library operation could not be done; the message says why."""

    hint, status = "see `launcher.py models list`", 400


def library_file() -> Path:
    return paths.home() / "library.json"


def _locked() -> AbstractContextManager[None]:
    """The library held for one read-modify-write, by this thread and against other processes."""
    return paths.store_lock(library_file())


def _read() -> dict[str, Any]:
    """The library file, checked record by record: an unreadable file is moved aside and its backup restored
    (``paths.read_json``); a record that is not a model entry is left out with a warning naming it."""
    path = library_file()
    data = paths.read_json(path)
    for key in ("models", "pairs"):
        if not isinstance(data.get(key), dict):
            if key in data:
                paths.warn(f"{path}: '{key}' is not a JSON object; ignoring it")
            data[key] = {}
    for mid, rec in list(data["models"].items()):
        path_ok = isinstance(rec, dict) and isinstance(rec.get("path"), str) and "\x00" not in rec["path"]
        if not (path_ok and rec["path"]):
            paths.warn(f"{path}: model record {mid!r} has no file path; ignoring it")
            del data["models"][mid]
    for key, rec in list(data["pairs"].items()):
        if not isinstance(rec, dict):
            del data["pairs"][key]
    return data


def _write(data: dict[str, Any]) -> None:
    paths.write_json(library_file(), data, indent=1, sort_keys=True)


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.")
    return s or "model"


def register(model_id: str, path: Path, source: str, **extra: Any) -> dict[str, Any]:
    """Record an installed model (``source``: hub, import, derived)."""
    with _locked():
        data = _read()
        record = {"id": model_id, "path": str(Path(path).resolve()), "source": source, **extra}
        data["models"][model_id] = record
        _write(data)
    return record


def installed(cat: Optional[Catalog] = None, with_meta: bool = True) -> list[dict[str, Any]]:
    """Every model present on disk: catalog files that are complete, then registered files that exist."""
    cat = cat or load()
    out: dict[str, dict[str, Any]] = {}
    for entry in cat.models.values():
        path = paths.models_dir() / entry.file
        if fileops.is_done(path):
            out[entry.id] = {"id": entry.id, "path": str(path), "source": "catalog", "name": entry.name,
                             "repo": entry.repo}
    records = _read()["models"]  # written by rename: a whole file, the old or the new
    for mid, rec in records.items():
        if mid not in out and Path(rec["path"]).is_file():
            out[mid] = dict(rec)
    if with_meta:
        for rec in out.values():
            try:
                m, _ = meta.read(rec["path"])
                rec["meta"] = m.to_dict()
            except GGUFError as exc:  # listed as unusable, with the reason naming the file and the field
                rec["error"] = str(exc)
    return list(out.values())


def find(ref: str, cat: Optional[Catalog] = None) -> Optional[dict[str, Any]]:
    """An installed model by id, or by path (a .gguf file that is not registered is described ad hoc)."""
    for rec in installed(cat, with_meta=False):
        if rec["id"] == ref:
            return rec
    p = Path(ref).expanduser()
    if p.is_file():
        for rec in installed(cat, with_meta=False):
            if Path(rec["path"]).resolve() == p.resolve():
                return rec
        return {"id": slug(p.stem), "path": str(p.resolve()), "source": "path"}
    return None


def import_gguf(path: Path | str, copy: bool = False, model_id: Optional[str] = None) -> dict[str, Any]:
    """Add a local ``.gguf`` to the library after reading its header. With ``copy`` the file is copied into
    the models directory (for uploads, which live in a temporary directory); otherwise it stays where it is."""
    src = Path(path).expanduser()
    if src.is_dir():
        raise LibraryError(f"{src} is a folder: give the .gguf file inside it")
    if not src.is_file():
        raise LibraryError(f"no such file: {src}")
    if not os.access(src, os.R_OK):
        raise LibraryError(f"cannot read {src}: permission denied (check the file's permissions)")
    try:
        m, _ = meta.read(src)
    except GGUFError as exc:
        raise LibraryError(f"cannot import {src.name}: {exc}") from None
    mid = model_id or slug(src.stem)
    if find(mid) is not None and Path(find(mid)["path"]).resolve() != src.resolve():
        mid = f"{mid}-{m.vocab_fingerprint[:6]}"
    dest = src
    if copy:
        dest = paths.models_dir() / (slug(src.stem) + ".gguf")
        if dest.exists():
            raise LibraryError(f"{dest.name} is already in the models directory; delete it first")
        fileops.check_free_space(dest.parent, src.stat().st_size)
        with fileops.atomic_output(dest) as tmp:
            shutil.copyfile(src, tmp)
            _check_copy(src, tmp, m.file_size)
        fileops.mark_done(dest, fileops.sha256_file(dest, f"hashing {dest.name}"))
    return register(mid, dest, "import", name=m.name or src.stem, copied=copy)


def _check_copy(src: Path, copied: Path, expected: int) -> None:
    """Refuse a copy that is not the file that was checked: the source shrank or grew while it was copied
    (still being written, cut by another program), or the copy's own header or tensor data is not whole."""
    size = copied.stat().st_size
    if size != expected:
        raise LibraryError(f"cannot import {src.name}: it changed while it was copied ({expected} bytes when "
                           f"checked, {size} bytes copied); wait until it is complete and import it again")
    try:
        ggufheader.check_layout(ggufheader.read_file(copied), size)
    except GGUFError as exc:
        raise LibraryError(f"cannot import {src.name}: the copy is not whole ({exc})") from None


def delete(model_id: str, cat: Optional[Catalog] = None) -> str:
    """Remove a model: files in the models directory are deleted, files elsewhere only forgotten."""
    rec = find(model_id, cat)
    if rec is None or rec.get("source") == "path":
        raise LibraryError(f"no installed model {model_id!r}")
    path = Path(rec["path"])
    inside = path.resolve().parent == paths.models_dir().resolve()
    with _locked():  # the file goes first: cut short here, a record without its file is not listed
        if inside:
            path.unlink(missing_ok=True)
            fileops.manifest_path(path).unlink(missing_ok=True)
        data = _read()
        data["models"].pop(rec["id"], None)
        _write(data)
    if inside:
        return f"deleted {path.name}"
    return f"forgot {rec['id']} (the file {path} was left in place)"


def remember_pair(target_id: str, draft_id: str, ok: bool, reason: str, **extra: Any) -> dict[str, Any]:
    with _locked():
        data = _read()
        rec = {"target": target_id, "draft": draft_id, "ok": ok, "reason": reason, **extra}
        data["pairs"][f"{target_id}+{draft_id}"] = rec
        _write(data)
    return rec


def pairs() -> list[dict[str, Any]]:
    return list(_read()["pairs"].values())
