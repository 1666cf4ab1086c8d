"""Where Tandem keeps its data: one directory, the platform's user data dir or ``$TANDEM_HOME``."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import platformdirs

from app.engine.errors import TandemError

if sys.platform != "win32":  # Linux and macOS; elsewhere a store is guarded within one process only
    import fcntl

APP_NAME = "tandem"


def home() -> Path:
    """The data directory (created on first use): models, derived files, settings, history."""
    env = os.environ.get("TANDEM_HOME")
    root = Path(env).expanduser() if env else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    root.mkdir(parents=True, exist_ok=True)
    return root


def sub(name: str) -> Path:
    """A sub-directory of :func:`home`, created on first use."""
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    return sub("models")


def downloads_dir() -> Path:
    return sub("downloads")


STALE_TEMP_S = 3600  # a temporary download folder this old, or whose process is gone, is left over


def download_temp() -> Path:
    """A fresh temporary folder for one download, under ``downloads/tmp/`` and named after this process, so
    that :func:`clean_stale_downloads` can tell a killed download's leftovers from a running one."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"pid{os.getpid()}-", dir=sub("downloads/tmp")))


def clean_stale_downloads(max_age_s: float = STALE_TEMP_S) -> list[Path]:
    """Remove what killed downloads left: folders in ``downloads/tmp/`` whose process is gone (or, when no
    process is named, older than ``max_age_s``), and the ``downloads/tmp*`` folders of earlier versions older
    than that. Returns what was removed; run at start and before each download."""
    import shutil

    removed = []
    now = time.time()
    candidates = [d for d in downloads_dir().glob("tmp?*") if d.is_dir()]
    candidates += [d for d in (downloads_dir() / "tmp").glob("*") if d.is_dir()]
    for d in candidates:
        owner = d.name[3:].split("-", 1)[0] if d.name.startswith("pid") else ""
        try:
            age = now - d.stat().st_mtime
        except OSError:
            continue
        stale = not _alive(int(owner)) if owner.isdigit() else age > max_age_s
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


_OWNED = re.compile(r"\.pid(\d+)-[0-9a-f]+\.(part|tmp)$")  # owned_temp's names
_LEGACY_TMP = re.compile(r"\.tmp(\d+)$")  # the old write_json temp files: named after the process only


def owned_temp(path: Path, suffix: str = ".part") -> Path:
    """A temporary sibling of ``path`` that no other writer shares (two imports of two ``model.gguf`` each get
    their own), named after this process so that :func:`clean_stale_files` can tell a killed writer's file
    from one that a live process is still writing."""
    path = Path(path)
    return path.with_name(f"{path.name}.pid{os.getpid()}-{secrets.token_hex(4)}{suffix}")


def final_name(path: Path | str) -> str:
    """The file a temporary file of :func:`owned_temp` becomes (``library.json`` for
    ``library.json.pid12-ab.tmp``): what a message names."""
    return _OWNED.sub("", str(path))


def clean_stale_files(max_age_s: float = STALE_TEMP_S) -> list[Path]:
    """Remove the temporary files killed processes left in the data folder (the top folder, ``models/``,
    ``pairlab/``, ``downloads/parts/``): a ``.part`` or ``.tmp`` whose owner process is gone, and an unnamed
    ``.part`` of earlier versions untouched for ``max_age_s``. A file of a live process is never touched.
    Returns what was removed; run at start."""
    root = home()
    folders = [root, root / "models", root / "pairlab", root / "downloads" / "parts"]
    folders += [d for d in (root / "downloads" / "parts").glob("*") if d.is_dir()]
    removed, now = [], time.time()
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            owner = _OWNED.search(entry.name) or _LEGACY_TMP.search(entry.name)
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                if owner:
                    stale = not _alive(int(owner.group(1)))
                else:
                    stale = entry.name.endswith(".part") and now - entry.stat().st_mtime > max_age_s
                if stale:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
            except OSError:  # gone meanwhile, or not ours to remove
                continue
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no process id at all
        return False
    except OSError:  # another user's process: alive
        return True
    return True


class OutputPathError(TandemError, ValueError):
    """An output file that cannot be written; raised before the work that would fill it."""

    hint, status, code = "give a path to a file in a folder you can write", 400, "output_path"


def check_writable(path: Path | str) -> Path:
    """``path`` as an output file, checked before a long run: its folder exists and takes a new file, and the
    file itself, when it exists, is a file that can be written (nothing is created or truncated here)."""
    import tempfile

    path = Path(path).expanduser()
    where = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OutputPathError(f"cannot write {path}: it is a folder; give a file name")
    if not where.is_dir():
        raise OutputPathError(f"cannot write {path}: the folder {where} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".tandem-check-"):
            pass
        if path.exists():
            with open(path, "r+b"):
                pass
    except OSError as exc:
        raise OutputPathError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def settings_file() -> Path:
    return home() / "settings.json"


def warn(message: str) -> None:
    """One line on stderr about a file the app could not use and what it did instead; kept for the UI too."""
    _warnings.append(message)
    print(f"[tandem] warning: {message}", file=sys.stderr, flush=True)


def warnings() -> list[str]:
    """The warnings of this process so far (oldest first)."""
    return list(_warnings)


_warnings: list[str] = []


def move_aside(path: Path, why: str) -> Path:
    """Rename an unreadable store to ``<name>.corrupt-<timestamp>`` (never delete what a user might want back)
    and say so in one line naming both files; returns the new path."""
    path = Path(path)
    dest = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    os.replace(path, dest)
    warn(f"{path} is unreadable ({why}); moved it to {dest.name}")
    return dest


def backup_of(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".bak")


class _Held:
    """One store's lock in this process: re-entrant for the thread that holds it, with the lock file's
    descriptor open while any level holds it."""

    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self.depth = 0
        self.fd = -1


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


@contextmanager
def store_lock(path: Path) -> Iterator[None]:
    """Hold the store ``path`` for one read-modify-write: against the other threads of this process
    (re-entrant) and against every other process on the same data folder (``flock`` on ``<name>.lock``). Two
    processes (the app and ``serve``, two commands) each write a whole file by rename, so without this one
    would write back what it read before the other's change, and lose it; the kernel drops the lock if the
    holder is killed."""
    key = str(Path(path).absolute())
    with _held_guard:
        held = _held.setdefault(key, _Held())
    with held.rlock:
        held.depth += 1
        try:
            if held.depth == 1:
                held.fd = _lock_file(Path(key))
            yield
        finally:
            held.depth -= 1
            if held.depth == 0 and held.fd >= 0:
                os.close(held.fd)  # closing the descriptor releases the flock
                held.fd = -1


def _lock_file(path: Path) -> int:
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    if sys.platform != "win32":
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
    return fd


def read_json(path: Path) -> dict:
    """A JSON object stored by ``write_json``; ``{}`` when the file is missing. A file that does not parse (cut
    short, overwritten) is moved aside with a warning and the last good copy (``<name>.bak``, written by every
    save) is put back in its place, so nothing is silently dropped and the next save does not shrink it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        warn(f"cannot read {path} ({exc.strerror or exc}); using no saved data this time")
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        return data
    except ValueError as exc:
        with store_lock(path):  # another process may be repairing it too, or have just written a good copy
            try:
                data = json.loads(path.read_bytes().decode("utf-8"))
                if isinstance(data, dict):
                    return data
            except (OSError, ValueError):
                pass
            if path.exists():
                move_aside(path, _short(exc))
            return _restore(path)


def _restore(path: Path) -> dict:
    backup = backup_of(path)
    try:
        data = json.loads(backup.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (OSError, ValueError):
        warn(f"no good backup of {path.name}: starting it empty")
        return {}
    _write_atomic(path, backup.read_bytes())
    warn(f"restored {path.name} from {backup.name}")
    return data


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


def write_json(path: Path, data: dict, indent: int = 1, sort_keys: bool = False) -> None:
    """Write ``data`` atomically (a sibling temporary file, flushed to disk, then one rename: readers never see
    half a file, a crash leaves the old or the new one) and keep the same bytes as ``<name>.bak``."""
    path = Path(path)
    raw = json.dumps(data, indent=indent, sort_keys=sort_keys).encode("utf-8")
    _write_atomic(path, raw)
    _write_atomic(backup_of(path), raw)


def write_text_atomic(path: Path, text: str) -> None:
    """A text file written as ``write_json`` writes (temporary file, fsync, rename), without a backup."""
    _write_atomic(Path(path), text.encode("utf-8"))


def _write_atomic(path: Path, raw: bytes) -> None:
    tmp = owned_temp(path, ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # the rename itself reaches the disk with the directory
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
