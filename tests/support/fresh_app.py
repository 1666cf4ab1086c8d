"""The real app (``launcher.py``) on a data folder of its own, for the browser tests that change the models folder
(Get, Import, Delete) and so cannot share the test cache's: it starts with the demo-smollm2 pair only (hard links
to the test cache's files) and demo-gemma3's draft as the four wheel parts a fetch keeps, already verified, so Get
of demo-gemma3 assembles its draft and derives its target with no network (pip's index and the Hub point at a
closed port: a fetch that tried to download would fail, not reach the internet)."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from app import paths
from app.models import fileops, wheelparts
from app.models.catalog import load
from app.service.ports import ephemeral_port
from app.testing import gpu_layers
from support.ui_server import ARTIFACTS, ROOT, _stop

CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port: every request there fails at once


def _link(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:  # another file system: a copy
        shutil.copy2(src, dest)


def fresh_home(smol: tuple[Path, Path], gemma_draft: Path) -> Path:
    """A data folder with the demo-smollm2 files and demo-gemma3's draft as verified wheel parts (not yet a model)."""
    home = Path(tempfile.mkdtemp(prefix="tandem-fresh-home-"))
    atexit.register(shutil.rmtree, home, True)
    models = home / "models"
    models.mkdir()
    for path in smol:
        _link(path, models / path.name)
        shutil.copy2(fileops.manifest_path(path), fileops.manifest_path(models / path.name))
    entry = load().models["gemma-3-270m-q4_k_m"]
    parts = [home / p.relative_to(paths.home()) for p in wheelparts.part_files(entry)]
    parts[0].parent.mkdir(parents=True)
    data = gemma_draft.read_bytes()
    step = -(-len(data) // len(parts))
    for i, part in enumerate(parts):
        chunk = data[i * step:(i + 1) * step]
        part.write_bytes(chunk)
        fileops.mark_done(part, hashlib.sha256(chunk).hexdigest())
    return home


def start(home: Path, name: str, timeout: float = 300.0) -> str:
    """Start the app on ``home``; its URL once it answers. Stopped when the test process ends."""
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"app-server-{name}.log"
    log = open(log_path, "w")
    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1", HF_ENDPOINT=CLOSED, HF_HUB_OFFLINE="1",
               PIP_INDEX_URL=f"{CLOSED}/simple", PIP_RETRIES="0", PIP_TIMEOUT="2")
    ngl = str(gpu_layers())
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "--no-browser", "--port", str(ephemeral_port()),
                             "-ngl", ngl, "-ngld", ngl], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    atexit.register(_stop, proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode}; see {log_path}")
        served = re.search(r"serving on (http://[\d.]+:\d+)", log_path.read_text())
        if served:
            url = served.group(1) + "/"
            try:
                with urllib.request.urlopen(url + "gradio_api/info", timeout=5) as r:
                    if r.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"the app did not answer within {timeout:.0f}s; see {log_path}")
