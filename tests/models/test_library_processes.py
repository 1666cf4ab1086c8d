"""One data folder, many processes: the app and ``serve``, or two commands, import and delete models and write
tuned settings and baselines at the same time. Real child processes on one scratch data folder; every record
each wrote must be there at the end, and none it deleted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support.tiny_gguf import write_tiny

pytestmark = pytest.mark.hostile  # a fault: two writers on one folder, nothing lost

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 50

WORKER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from app.lab import baselines, tuned
    from app.models import library

    n, files, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    while not go.exists():  # both start together
        time.sleep(0.01)
    machine = {"fingerprint": "same-machine", "cpu": "test"}
    for i in range(int(sys.argv[4])):
        library.import_gguf(files / f"w{n}-{i}.gguf", model_id=f"w{n}-{i}")
        if i % 2:
            library.delete(f"w{n}-{i - 1}")
        tuned.save_tuned(f"pair-{n}-{i}", {"k": i}, machine=machine)
        baselines.save(f"w{n}-{i}", tps=float(i), tokens=i, target="t", backend="cpu")
""")


def test_two_processes_lose_no_record_and_resurrect_none(tmp_path):
    home, files = tmp_path / "home", tmp_path / "files"
    files.mkdir()
    first = write_tiny(files / "w0-0.gguf")
    for n in (0, 1):
        for i in range(ROUNDS):
            if (n, i) != (0, 0):
                (files / f"w{n}-{i}.gguf").write_bytes(first.read_bytes())
    go = tmp_path / "go"
    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(n), str(files), str(go), str(ROUNDS)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (0, 1)]
    time.sleep(0.5)
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]

    library = json.loads((home / "library.json").read_text())["models"]
    kept = {f"w{n}-{i}" for n in (0, 1) for i in range(ROUNDS) if i % 2 or i == ROUNDS - 1}
    assert set(library) == kept  # no import lost, no deleted record back
    tuned = json.loads((home / "tuned.json").read_text())["same-machine"]["pairs"]
    assert set(tuned) == {f"pair-{n}-{i}" for n in (0, 1) for i in range(ROUNDS)}
    baselines = json.loads((home / "baselines.json").read_text())
    assert set(baselines) == {f"w{n}-{i}" for n in (0, 1) for i in range(ROUNDS)}
    assert not [p.name for p in home.iterdir() if ".tmp" in p.name]
