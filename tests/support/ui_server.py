"""Starts the real app once per test process (``launcher.py --no-browser --port <free>``) for the UI tests."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from app.testing import gpu_layers, test_home
from app.service.ports import ephemeral_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
_server: dict = {}


def private_home() -> Path:
    """A fresh data directory sharing the test cache's models, so what the UI tests store (plain speeds,
    tuned settings, Pair lab runs) neither leaks into other tests nor depends on earlier runs."""
    home = Path(tempfile.mkdtemp(prefix="tandem-ui-home-"))
    atexit.register(shutil.rmtree, home, True)
    models = Path(os.environ.get("TANDEM_HOME") or test_home()) / "models"
    models.mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(models, target_is_directory=True)
    return home


def app_url(timeout: float = 300.0) -> str:
    """URL of the running app, starting it on first use (TANDEM_HOME = the test cache)."""
    if "url" in _server:
        return _server["url"]
    port = ephemeral_port()
    env = dict(os.environ, TANDEM_HOME=str(private_home()), TANDEM_QUIET="1")
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "app-server.log", "w")
    ngl = str(gpu_layers())
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "--no-browser", "--port", str(port),
                             "-ngl", ngl, "-ngld", ngl], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    atexit.register(_stop, proc, log)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        served = re.search(r"serving on (http://[\d.]+:\d+)", (ARTIFACTS / "app-server.log").read_text())
        if served:  # the launcher moves to the next port if ours was taken meanwhile
            url = served.group(1) + "/"
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode}; see {ARTIFACTS / 'app-server.log'}")
        try:
            with urllib.request.urlopen(url + "gradio_api/info", timeout=5) as r:
                if r.status == 200:
                    _server["url"] = url
                    return url
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the app did not answer on {url} within {timeout:.0f}s")


def _stop(proc: subprocess.Popen, log) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    log.close()
