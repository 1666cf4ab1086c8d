"""Hostile input, part 3: the real app starts on a data folder holding a registered model whose header was
overwritten with a field of the wrong type, a Pair lab database that is not a database, and a library cut short,
and says which (``launcher.py`` in a child process, asked over gradio_client)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.testing import gpu_layers
from app.service.ports import ephemeral_port
from models.test_library_files import gguf_with
from support.ui_server import ARTIFACTS, ROOT, private_home

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost


def test_the_app_starts_on_bad_files_and_names_them(monkeypatch):
    gradio_client = pytest.importorskip("gradio_client")
    from app.models import library

    home = private_home()
    monkeypatch.setenv("TANDEM_HOME", str(home))
    (home / "imports").mkdir()
    bad = gguf_with(home / "imports" / "later.gguf")
    library.import_gguf(bad)
    for i in range(3):
        library.import_gguf(gguf_with(home / "imports" / f"other{i}.gguf"))
    gguf_with(bad, **{"tokenizer.ggml.bos_token_id": "x"})  # overwritten after it was registered
    lib = library.library_file()
    lib.write_bytes(lib.read_bytes()[:-20])
    (home / "pairlab.sqlite").write_bytes(b"not a database\n" * 500)

    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / "hostile-start.log"
    port = ephemeral_port()
    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_QUIET="1")
    ngl = str(gpu_layers())
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "--no-browser", "--port", str(port),
                                 "-ngl", ngl, "-ngld", ngl], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url, deadline = None, time.monotonic() + 300
        while url is None and time.monotonic() < deadline:
            text = log_path.read_text()
            assert proc.poll() is None, f"the app exited with {proc.returncode}:\n{text[-3000:]}"  # once: it did
            served = re.search(r"serving on (http://[\d.]+:\d+)", text)
            if served:
                try:
                    with urllib.request.urlopen(served.group(1) + "/gradio_api/info", timeout=5) as r:
                        url = served.group(1) + "/" if r.status == 200 else None
                except OSError:
                    pass
            time.sleep(0.5)
        assert url, "the app did not start"
        text = log_path.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert re.search(r"library\.json is unreadable .*; moved it to library\.json\.corrupt-", text)
        assert "restored library.json from library.json.bak" in text
        assert "the Pair lab history started fresh: pairlab.sqlite was unreadable" in text

        client = gradio_client.Client(url, verbose=False)
        rows = client.predict(api_name="/models_refresh")
        rows = rows["data"] if isinstance(rows, dict) else rows
        by_id = {row[0]: row for row in rows}
        assert {"other0", "other1", "other2"} <= set(by_id)  # the library came back whole
        assert "later.gguf" in by_id["later"][-1] and "bos_token_id" in by_id["later"][-1]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert list(home.glob("pairlab.sqlite.corrupt-*")) and list(home.glob("library.json.corrupt-*"))
