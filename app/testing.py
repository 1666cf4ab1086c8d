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
