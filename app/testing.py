"""Where the test suite keeps its data: a persistent cache so the demo models are fetched once."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def test_home() -> Path:
    """``$TANDEM_TEST_HOME``, else the platform's user cache dir (survives fresh clones, e.g. in CI)."""
    env = os.environ.get("TANDEM_TEST_HOME")
    root = Path(env) if env else Path(platformdirs.user_cache_dir("tandem", appauthor=False)) / "test-home"
    root.mkdir(parents=True, exist_ok=True)
    return root


def gpu_layers() -> int:
    """GPU layers for every model the tests load: ``$TANDEM_TEST_GPU_LAYERS`` (a number; -1 or ``all``: every
    layer), 0 by default. ``scripts/gpu-check.sh`` runs the suite with -1."""
    text = os.environ.get("TANDEM_TEST_GPU_LAYERS", "0").strip().lower()
    try:
        return -1 if text == "all" else int(text)
    except ValueError:
        raise SystemExit(f"TANDEM_TEST_GPU_LAYERS must be a number or 'all', not {text!r}") from None


def load_options(**kw):
    """``LoadOptions(**kw)`` with the tests' GPU layers (see :func:`gpu_layers`)."""
    from app.engine.llama.backend import LoadOptions

    return LoadOptions(n_gpu_layers=gpu_layers(), **kw)
