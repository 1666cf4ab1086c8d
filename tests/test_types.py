"""The type checker over app/ (mypy, configured in pyproject.toml), as part of the test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes_on_app():
    pytest.importorskip("mypy", reason="mypy is in the test extras: pip install -e .[test]")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
