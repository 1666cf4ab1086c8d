"""Where Tandem keeps its data: one directory, the platform's user data dir or ``$TANDEM_HOME``."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

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


def settings_file() -> Path:
    return home() / "settings.json"
