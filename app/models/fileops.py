"""File primitives shared by every fetch and derive step: hashing with progress, atomic writes, and a
sidecar manifest that makes a finished step instant on re-run.

A finished file ``X`` has a manifest ``X.ok`` (JSON: sha256, size, mtime_ns). A file without a matching
manifest is never used: it is re-verified (hash) or re-made. Writes go to a ``.part`` file of their own
(``X.pid<N>-<tag>.part``: two writers never share one, and one a killed process left is cleaned at the next
start) and are renamed into place only after the checksum matched, so no half file is ever used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from tqdm.auto import tqdm

from app import paths
from app.engine.errors import TandemError

CHUNK = 1 << 20
Progress = Callable[[int, int], None]  # (done_bytes, total_bytes)


class ChecksumError(TandemError, RuntimeError):
    hint = "the bad file was not kept; fetch it again"


class DiskFullError(TandemError, OSError):
    hint, code = "", "disk_full"  # app.errors adds what to do


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".ok")


def is_done(path: Path) -> bool:
    """True when ``path`` exists and its manifest matches its size and mtime (no hashing: instant)."""
    mpath = manifest_path(path)
    if not (path.exists() and mpath.exists()):
        return False
    try:
        meta = json.loads(mpath.read_text())
    except (OSError, ValueError):
        return False
    st = path.stat()
    return meta.get("size") == st.st_size and meta.get("mtime_ns") == st.st_mtime_ns


def recorded_sha256(path: Path) -> Optional[str]:
    try:
        return json.loads(manifest_path(path).read_text()).get("sha256")
    except (OSError, ValueError):
        return None


def mark_done(path: Path, sha256: str) -> None:
    st = path.stat()
    paths.write_text_atomic(manifest_path(path),  # flushed to disk before the rename: never half a manifest
                            json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def sha256_file(path: Path, label: str = "", progress: Optional[Progress] = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    with open(path, "rb") as f, ProgressBar(label or f"checking {path.name}", total, progress) as bar:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()


def check_free_space(directory: Path, needed: int, margin: int = 64 << 20, what: str = "") -> None:
    free = shutil.disk_usage(directory).free
    if free < needed + margin:
        raise DiskFullError(
            f"not enough disk space in {directory}{' ' + what if what else ''}: need {needed / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free"
        )


@contextmanager
def atomic_output(dest: Path) -> Iterator[Path]:
    """Yield a temporary path of this writer's own next to ``dest``; on success it is renamed to ``dest``, on
    error removed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.owned_temp(dest)
    try:
        yield tmp
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_STAGE: ContextVar[str] = ContextVar("tandem_progress_stage", default="")


def stage() -> str:
    """The label of the innermost progress bar open in this thread ("fetching x.gguf", "deriving y.gguf (F32)"):
    what the figures a progress callback is given right now count. One fetch runs several steps, each counting
    from zero (the parts, then the assembled copy; the draft, then the target derived from it), so a figure
    shown without its step's name would seem to go backwards."""
    return _STAGE.get()


@contextmanager
def staged(label: str) -> Iterator[None]:
    """Name the step for :func:`stage` where the figures come from elsewhere (huggingface_hub's own bar)."""
    token = _STAGE.set(label)
    try:
        yield
    finally:
        _STAGE.reset(token)


class ProgressBar:
    """A terminal progress bar (tqdm) that also reports to an optional callback (the UI's); while it is open,
    :func:`stage` names it."""

    def __init__(self, label: str, total: int, progress: Optional[Progress] = None):
        self.total, self.done, self.progress, self.label = total, 0, progress, label
        self._token: Any = None
        self.bar = tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                        disable=os.environ.get("TANDEM_QUIET") == "1")

    def update(self, n: int) -> None:
        self.done += n
        self.bar.update(n)
        if self.progress:
            self.progress(self.done, self.total)

    def __enter__(self) -> "ProgressBar":
        self._token = _STAGE.set(self.label)
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None:
            _STAGE.reset(self._token)
        self.bar.close()
