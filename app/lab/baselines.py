"""Stored plain-decoding baselines: tokens/s of the loaded pair's target, one entry per target file, load
options and machine, kept in ``baselines.json`` under ``paths.home()``."""

from __future__ import annotations

import time
from typing import Optional

from app import paths

BASELINE_FILE = "baselines.json"


def baseline_path():
    return paths.home() / BASELINE_FILE


_file = baseline_path


def get(key: str) -> Optional[dict]:
    return paths.read_json(_file()).get(key)


def save(key: str, tps: float, tokens: int, target: str, backend: str) -> dict:
    entry = {"tps": tps, "tokens": tokens, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),  # its age to the second
             "target": target, "backend": backend}
    with paths.store_lock(_file()):  # another process may be saving its own baseline
        data = paths.read_json(_file())
        data[key] = entry
        paths.write_json(_file(), data, indent=1)
    return entry
