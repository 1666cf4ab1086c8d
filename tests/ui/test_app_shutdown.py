"""SIGTERM to the app (``launcher.py``, Gradio with the API mounted) mid-stream: the running generation stops,
the queued API request is answered 503 (or its connection closed), and the process exits within seconds."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from app.service.ports import ephemeral_port
from app.testing import gpu_layers
from support.halfsent import half_sent_closed_after
from support.queued import ask_in_thread
from support.ui_server import ARTIFACTS, ROOT, _stop

openai = pytest.importorskip("openai")
LONG = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]


def test_sigterm_mid_stream_stops_the_app_and_answers_the_queue():
    """Also: a half-sent request is closed after the header deadline (the same process, to load the pair once)."""
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / "app-sigterm.log"
    log = open(log_path, "w")
    ngl = str(gpu_layers())
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "--no-browser", "--port", str(ephemeral_port()),
                             "-ngl", ngl, "-ngld", ngl], cwd=ROOT, env=dict(os.environ, TANDEM_QUIET="1"),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url, deadline = None, time.monotonic() + 300
        while url is None:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            found = re.search(r"serving on (http://[\d.]+:\d+)", log_path.read_text())
            url = found.group(1) if found else None
            time.sleep(0.3)
        host, port = url.removeprefix("http://").split(":")
        half_sent_closed_after(host, int(port))  # Gradio builds the app's server: the header deadline holds there too
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=5, timeout=120)
        chunks = iter(client.chat.completions.create(model="demo-smollm2", messages=LONG, max_tokens=100_000,
                                                     stream=True))
        next(chunks)  # the generation runs
        waiter, queued = ask_in_thread(client.with_options(max_retries=0), LONG)
        time.sleep(1.0)  # the second request waits its turn
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            for _ in chunks:
                pass
        except (openai.APIConnectionError, openai.APIError):
            pass
        proc.wait(60)
        exit_s = time.monotonic() - t0
        waiter.join(30)
        print(f"\nthe app exited {exit_s:.2f} s after SIGTERM (code {proc.returncode}); queued request: {queued}")
        assert exit_s < 10, f"still running {exit_s:.1f} s after SIGTERM"
        assert queued.get("status") == 503, queued
        assert "Traceback" not in log_path.read_text()
    finally:
        if proc.poll() is None:
            _stop(proc, log)
        else:
            log.close()
