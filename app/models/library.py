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


def locked() -> AbstractContextManager[None]:
    """The library held for one read-modify-write, by this thread and against other processes; a model file is
    moved into the models directory and recorded under it, so no other process sees one without the other."""
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
    with locked():
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
    _check_signature(src)
    try:
        m, _ = meta.read(src)
    except GGUFError as exc:
        raise LibraryError(f"cannot import {src.name}: {exc}") from None
    if not copy:
        with locked():
            mid = _free_id(model_id or slug(src.stem), src, m.vocab_fingerprint[:6])
            return register(mid, src, "import", name=m.name or src.stem, copied=False)
    base = slug(src.stem)
    fileops.check_free_space(paths.models_dir(), src.stat().st_size)
    tmp = paths.owned_temp(paths.models_dir() / f"{base}.gguf")  # this import's own: never shared
    try:
        shutil.copyfile(src, tmp)
        _check_copy(src, tmp, m.file_size)
        digest = fileops.sha256_file(tmp, f"hashing the copy of {src.name}")  # the bytes that will be kept
        with locked():  # placed, described and recorded together: no other process sees one without the rest
            dest = _place(tmp, base, digest, src.name)
            mid = _free_id(model_id or base, dest, m.vocab_fingerprint[:6])
            return register(mid, dest, "import", name=m.name or src.stem, copied=True, sha256=digest)
    finally:
        tmp.unlink(missing_ok=True)


def _check_signature(src: Path) -> None:
    """A file that does not begin with "GGUF" is refused in one plain sentence naming how it begins —
    except the data folder's own files outside the models folder (a key, a store), whose bytes are never quoted."""
    try:
        with open(src, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise LibraryError(f"cannot read {src}: {exc.strerror or exc}") from None
    if head == ggufheader.GGUF_MAGIC:
        return
    what = f"{src.name} is not a GGUF file"
    where = src.resolve()
    if where.is_relative_to(paths.home().resolve()) and not where.is_relative_to(paths.models_dir().resolve()):
        raise LibraryError(f'{what} (a GGUF model file starts with "GGUF")')
    raise LibraryError(f'{what}: it {_described(head)}, a GGUF model file starts with "GGUF"')


def _described(head: bytes) -> str:
    """How a file begins, in words: its first characters where they are plain text, else their byte values."""
    if not head:
        return "is empty"
    if all(32 <= b < 127 for b in head):
        return f'starts with "{head.decode("ascii")}"'
    return "starts with the bytes " + " ".join(f"{b:02X}" for b in head)


def _place(tmp: Path, base: str, digest: str, shown: str) -> Path:
    """Move a checked copy into the models directory as ``<base>.gguf`` — or ``<base>-<sha>.gguf`` when a
    different file already has that name — with its manifest; a file with the same bytes already there is
    used as it is (registered again if nothing records it). Call with the library held."""
    for name in (f"{base}.gguf", f"{base}-{digest[:8]}.gguf"):
        dest = paths.models_dir() / name
        if not dest.exists():
            os.replace(tmp, dest)
            fileops.mark_done(dest, digest)
            return dest
        same = fileops.recorded_sha256(dest) if fileops.is_done(dest) else fileops.sha256_file(dest)
        if same == digest:
            owner = next((r for r in _read()["models"].values() if Path(r["path"]) == dest.resolve()), None)
            if owner is not None:
                raise LibraryError(f"{shown} is already imported as {owner['id']} ({dest.name})")
            fileops.mark_done(dest, digest)
            return dest
    raise LibraryError(f"cannot import {shown}: {base}.gguf and {base}-{digest[:8]}.gguf in the models directory "
                       "are other files")


def _free_id(wanted: str, path: Path, tag: str, also: Optional[dict[str, Any]] = None) -> str:
    """``wanted``, or ``wanted-<tag>`` (``-2``, ``-3`` …) when another file holds that id. Call with the library
    held, so that two processes never take one id."""
    records = [*installed(with_meta=False), *(also or {}).values()]
    held = {rec["id"]: Path(rec["path"]).resolve() for rec in records}
    candidates = [wanted, f"{wanted}-{tag}"] + [f"{wanted}-{tag}-{n}" for n in range(2, 1000)]
    for mid in candidates:
        if held.get(mid, Path(path).resolve()) == Path(path).resolve():
            return mid
    raise LibraryError(f"too many models named {wanted}: delete some first")


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
    with locked():  # the file goes first: cut short here, a record without its file is not listed
        if inside:
            path.unlink(missing_ok=True)
            fileops.manifest_path(path).unlink(missing_ok=True)
        data = _read()
        data["models"].pop(rec["id"], None)
        _write(data)
    if inside:
        return f"deleted {path.name}"
    return f"forgot {rec['id']} (the file {path} was left in place)"


def recover(cat: Optional[Catalog] = None) -> list[str]:
    """Put right what killed imports and downloads left, at start: temporary files whose process is gone are
    removed (``paths.clean_stale_files``), and a model in the models directory that nothing records (a process
    killed between placing the file and recording it, or a file put there by hand) is registered, so that
    ``list`` shows it and ``delete`` removes it. One line each, on stderr and in the returned list."""
    lines = []
    removed = paths.clean_stale_files()
    if removed:
        lines.append(f"removed {len(removed)} unfinished file{'s' if len(removed) > 1 else ''} that stopped "
                     f"processes left in {paths.home()}: {', '.join(sorted(p.name for p in removed))[:300]}")
    cat = cat or load()
    with locked():
        data = _read()
        known = {Path(rec["path"]).resolve() for rec in data["models"].values()}
        found = []
        orphans = [path for path in sorted(paths.models_dir().glob("*.gguf"))
                   if path.name not in cat.files and path.is_file() and path.resolve() not in known]
        if orphans and not cat.complete:  # which files are the catalog's is unknown: none is taken for an orphan
            lines.append(f"{cat.name} has no readable [models] table: {len(orphans)} file(s) in the models folder "
                         "with no record were left as they are")
            orphans = []
        for path in orphans:
            mid = _free_id(slug(path.stem), path, "found", data["models"])
            data["models"][mid] = {"id": mid, "path": str(path.resolve()), "source": "import", "name": path.stem,
                                   "copied": True}
            found.append((path.name, mid))
        if found:
            _write(data)
        for manifest in paths.models_dir().glob("*.gguf.ok"):  # a deleted model's description, left behind
            if not manifest.with_name(manifest.name[:-3]).exists():
                manifest.unlink(missing_ok=True)
    for name, mid in found:
        lines.append(f"{name} was in the models folder with no record (an import or download cut short); "
                     f"registered it as {mid} — `launcher.py models delete {mid}` removes it")
    for line in lines:
        paths.warn(line)
    return lines


def remember_pair(target_id: str, draft_id: str, ok: bool, reason: str, **extra: Any) -> dict[str, Any]:
    with locked():
        data = _read()
        rec = {"target": target_id, "draft": draft_id, "ok": ok, "reason": reason, **extra}
        data["pairs"][f"{target_id}+{draft_id}"] = rec
        _write(data)
    return rec


def pairs() -> list[dict[str, Any]]:
    return list(_read()["pairs"].values())
