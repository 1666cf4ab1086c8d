"""Imports that cannot lie or leak: a real ``kill -9`` in the middle of ``models import --copy`` and between
placing the file and recording it, two imports of two different files both named ``model.gguf`` at once, and
the temporary files of live and dead processes. Real child processes through ``launcher.py`` on a scratch data
folder; the source models are generated GGUFs whose tensor data is sparse, so a copy takes seconds."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from app import paths
from support.tiny_gguf import BASE

pytestmark = pytest.mark.hostile  # a fault: a killed or concurrent import, nothing kept that lies

ROOT = Path(__file__).resolve().parents[2]


def big_gguf(path: Path, n_bytes: int, tokens=BASE) -> Path:
    """A whole GGUF of ``n_bytes`` of (sparse, zero) tensor data: quick to make, slow to copy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(list(tokens))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    rows = n_bytes // 32
    w.add_tensor_info("token_embd.weight", (rows, 8), np.dtype(np.float32), rows * 32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    start = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(start + (-start % 32) + rows * 32)
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def launcher(home: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1"))


def start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1"))


def listed(home: Path) -> dict[str, dict]:
    proc = launcher(home, "models", "list", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {rec["id"]: rec for rec in json.loads(proc.stdout)["models"]}


def test_an_import_killed_mid_copy_leaves_a_part_the_next_start_removes(tmp_path):
    home, src = tmp_path / "home", big_gguf(tmp_path / "src" / "big.gguf", 512 << 20)
    models = home / "models"
    proc = start(home, "models", "import", "--copy", str(src))
    deadline = time.monotonic() + 120
    parts: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        parts = [p for p in models.glob("*.part") if p.stat().st_size > 0] if models.is_dir() else []
        if parts:
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL and parts, "the import ended before it could be killed mid-copy"
    assert parts[0].exists() and parts[0].stat().st_size < src.stat().st_size  # killed mid-copy: a half file

    ours = paths.owned_temp(models / "live.gguf")  # a part this (live) process is writing: never touched
    ours.write_bytes(b"still being written")
    proc = launcher(home, "models", "list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "removed 1 unfinished file" in proc.stderr and parts[0].name in proc.stderr
    assert not parts[0].exists() and ours.exists()
    assert not [p for p in models.iterdir() if p.name.startswith("big")]
    assert "big" not in listed(home)


KILL_AFTER_PLACING = textwrap.dedent("""
    import os, signal, sys
    from app.models import fileops, library

    def killed(*args, **kwargs):  # the file is in place, its manifest and record not yet written
        os.kill(os.getpid(), signal.SIGKILL)

    fileops.mark_done = killed
    library.import_gguf(sys.argv[1], copy=True)
""")


def test_an_import_killed_between_placing_and_recording_is_recovered(tmp_path):
    home, src = tmp_path / "home", big_gguf(tmp_path / "src" / "model.gguf", 1 << 20)
    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1")
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_PLACING, str(src)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    orphan = home / "models" / "model.gguf"
    assert orphan.is_file() and not (home / "library.json").exists()  # a file nothing records

    proc = launcher(home, "models", "list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "model.gguf was in the models folder with no record" in proc.stderr
    assert "registered it as model" in proc.stderr and str(orphan) in proc.stdout
    again = launcher(home, "models", "import", "--copy", str(src))  # the same bytes: said plainly, not refused forever
    assert again.returncode == 2 and "already imported as model" in again.stderr, again.stderr
    assert not list((home / "models").glob("*.part"))
    gone = launcher(home, "models", "delete", "model")
    assert gone.returncode == 0 and "deleted model.gguf" in gone.stdout, gone.stderr
    assert not orphan.exists() and "model" not in listed(home)
    back = launcher(home, "models", "import", "--copy", str(src))
    assert back.returncode == 0, back.stderr
    assert json.loads((home / "models" / "model.gguf.ok").read_text())["sha256"] == sha256(src)


def test_two_imports_of_two_files_named_model_gguf_keep_each_its_own_bytes(tmp_path):
    home = tmp_path / "home"
    one = big_gguf(tmp_path / "a" / "model.gguf", 128 << 20)
    other = big_gguf(tmp_path / "b" / "model.gguf", 128 << 20, tokens=[f"other{i}" for i in range(300)])
    assert sha256(one) != sha256(other)
    procs = [start(home, "models", "import", "--copy", str(f)) for f in (one, other)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    records = listed(home)
    assert len(records) == 2
    kept = sorted(sha256(Path(rec["path"])) for rec in records.values())
    assert kept == sorted([sha256(one), sha256(other)])  # each record is its own file, whole
    for rec in records.values():  # what each record and manifest say is what the file holds
        path = Path(rec["path"])
        assert rec["sha256"] == sha256(path) == json.loads(path.with_name(path.name + ".ok").read_text())["sha256"]
    assert not list((home / "models").glob("*.part"))


def test_only_the_temporary_files_of_stopped_processes_are_cleaned(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    models = paths.models_dir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_other = models / f"x.gguf.pid{sleeper.pid}-ab12.part"
        mine = paths.owned_temp(models / "y.gguf")
        dead = models / "z.gguf.pid999999999-ab12.part"
        dead_json = paths.home() / "library.json.tmp999999999"  # the old temp name of a JSON store
        old_unnamed, new_unnamed = models / "old.gguf.part", models / "new.gguf.part"
        for f in (live_other, mine, dead, dead_json, old_unnamed, new_unnamed):
            f.write_bytes(b"x")
        os.utime(old_unnamed, (time.time() - 7200, time.time() - 7200))
        removed = paths.clean_stale_files()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert set(removed) == {dead, dead_json, old_unnamed}
    assert live_other.exists() and mine.exists() and new_unnamed.exists()


def test_an_unreadable_catalog_never_turns_its_files_into_orphans(tmp_path, monkeypatch):
    from app.models import catalog, library

    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    (paths.models_dir() / "Catalog-Model.gguf").write_bytes(b"GGUF")  # a catalog model's file
    broken = tmp_path / "models.toml"
    for text in ("this is [not toml", "", "[models.x]\nfile = \"Catalog-Model.gguf\"\n"):  # the last: left out
        broken.write_text(text, encoding="utf-8")
        library.recover(catalog.load(broken))
        assert library.installed(catalog.load(broken), with_meta=False) == []
