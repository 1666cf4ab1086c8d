"""Where Tandem keeps its data: one directory, the platform's user data dir or ``$TANDEM_HOME``."""

from __future__ import annotations

import json
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


def read_json(path: Path) -> dict:
    """A JSON object stored by ``write_json``; ``{}`` when the file is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict, indent: int = 1, sort_keys: bool = False) -> None:
    """Write ``data`` atomically: a sibling temporary file, then one rename (readers never see half a file)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, sort_keys=sort_keys), encoding="utf-8")
    os.replace(tmp, path)
