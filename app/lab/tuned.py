"""Tuned settings per machine: the hardware fingerprint and the store that Chat and Compare read defaults from.

The Pair lab measures which draft, K and p_min are fastest *here*; the answer only holds for the same CPU,
GPU, backend and llama.cpp build, so settings are stored under ``TANDEM_HOME/tuned.json`` keyed by a
fingerprint of exactly those, then by pair id::

    {"<fingerprint>": {"machine": {...}, "pairs": {"<pair id>": {"proposer": …, "draft": …, "k": …,
                                                                 "p_min": …, "expected_speedup": …}}}}
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from app import paths
from app.engine.loop import DEFAULT_P_MIN
from app.models.hardware import ggml_devices

TUNED_FILE = "tuned.json"
SETTING_KEYS = ("proposer", "draft", "draft_id", "k", "p_min", "expected_speedup")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            import subprocess

            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=5)
            if out.stdout.strip():
                return out.stdout.strip()
        except Exception:
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _gpus() -> str:
    """The GPUs llama.cpp's ggml sees (names as ggml reports them), or 'none'."""
    try:
        names = [d.description or d.name for d in ggml_devices()]
    except Exception:  # a failed device probe: report none rather than fail the report
        names = []
    return ", ".join(names) or "none"


@lru_cache(maxsize=1)
def machine_info() -> dict:
    """What the speed of a pair depends on: CPU model and cores, backend (GPU), llama.cpp build, OS."""
    import llama_cpp

    from app.engine.llama.devices import active_backend

    try:
        import psutil

        physical, logical = psutil.cpu_count(logical=False), psutil.cpu_count(logical=True)
        memory_gb = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # pragma: no cover
        physical, logical, memory_gb = None, os.cpu_count(), None
    info = {
        "cpu": _cpu_model(),
        "gpu": _gpus(),
        "cores": physical,
        "threads": logical,
        "memory_gb": memory_gb,
        "backend": active_backend(),
        "llama_cpp": getattr(llama_cpp, "__version__", "unknown"),
        "os": f"{platform.system()} {platform.release()}",
        "arch": platform.machine(),
        "python": platform.python_version(),
    }
    info["fingerprint"] = fingerprint(info)
    return info


def fingerprint(info: dict) -> str:
    """A short stable hash of the fields that change speed (CPU, cores, GPU, backend, llama.cpp version)."""
    key = "|".join(str(info.get(k)) for k in ("cpu", "cores", "gpu", "backend", "llama_cpp", "arch"))
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def describe_machine(info: Optional[dict] = None) -> str:
    """One line for people: 'AMD EPYC, 2 cores, CPU backend, llama-cpp-python 0.3.36'."""
    info = info or machine_info()
    gpu = "" if info.get("gpu", "none") == "none" else f", {info['gpu']}"
    return (f"{info['cpu']}, {info['cores']} cores{gpu}, {info['backend']} backend, "
            f"llama-cpp-python {info['llama_cpp']}")


def tuned_path() -> Path:
    return paths.home() / TUNED_FILE


def _read() -> dict:
    return paths.read_json(tuned_path())


def _write(data: dict) -> None:
    paths.write_json(tuned_path(), data, indent=2)


def save_tuned(pair_id: str, settings: dict[str, Any], machine: Optional[dict] = None) -> dict:
    """Store ``settings`` (proposer, draft, k, p_min, expected_speedup, …) for ``pair_id`` on this machine."""
    machine = machine or machine_info()
    record = dict(settings)
    record.setdefault("tuned_at", time.strftime("%Y-%m-%d %H:%M:%S"))
    with paths.store_lock(tuned_path()):
        data = _read()
        slot = data.setdefault(machine["fingerprint"], {"machine": machine, "pairs": {}})
        slot["machine"] = machine
        slot.setdefault("pairs", {})[pair_id] = record
        _write(data)
    return record


def load_tuned(pair_id: Optional[str], machine: Optional[dict] = None) -> Optional[dict]:
    """The tuned settings for ``pair_id`` on this machine, or None (never tuned here).

    Keys: proposer ("auto" | "draft" | "lookup"), draft (model path, None for lookup), draft_id, k (int | "auto"),
    p_min, expected_speedup; plus category, spread, run_id, tuned_at and by_category when known.
    """
    if not pair_id:
        return None
    fp = (machine or machine_info())["fingerprint"]
    record = _read().get(fp, {}).get("pairs", {}).get(pair_id)
    return dict(record) if isinstance(record, dict) else None


def clear_tuned(pair_id: str, machine: Optional[dict] = None) -> bool:
    fp = (machine or machine_info())["fingerprint"]
    with paths.store_lock(tuned_path()):
        data = _read()
        removed = data.get(fp, {}).get("pairs", {}).pop(pair_id, None) is not None
        if removed:
            _write(data)
    return removed


def settings_from_recommendation(rec: dict, run_id: Optional[int] = None) -> dict:
    """The settings dict (the ``load_tuned`` / ``AppState.apply_defaults`` shape) for one recommendation."""
    return {
        "speculative": bool(rec.get("beats_plain", True)),  # nothing beat plain decoding: turn it off
        "proposer": rec["proposer"],
        "draft": rec.get("draft_path"),
        "draft_id": rec["draft"],
        "k": rec["k"],
        "p_min": rec["p_min"] if rec.get("p_min") is not None else DEFAULT_P_MIN,  # unused with a fixed K
        "expected_speedup": rec.get("speedup"),
        "spread": [rec.get("speedup_min"), rec.get("speedup_max")],
        "category": rec.get("category", "all"),
        "run_id": run_id,
    }
