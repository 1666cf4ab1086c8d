"""SIGTERM / SIGINT to ``launcher.py serve`` mid-stream: the running generation stops at its next step, the
queued request is answered 503 (or its stream closed), the process exits within seconds; a restart on the
same port right after does not wait out TIME_WAIT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from app.service.ports import ephemeral_port
from support.halfsent import half_sent_closed_after
from support.queued import ask_in_thread
from support.ui_server import ARTIFACTS, ROOT, _stop

openai = pytest.importorskip("openai")

PORT = ephemeral_port()  # both runs use it: the second starts while the first's connections are in TIME_WAIT
LONG = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]


def _start(log_name: str) -> tuple[subprocess.Popen, str, object]:
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")
    env = dict(os.environ, TANDEM_QUIET="1")
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "serve", "--port", str(PORT)], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{PORT}/"
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, (ARTIFACTS / log_name).read_text()
        try:
            with urllib.request.urlopen(url + "v1/models", timeout=5) as r:
                if r.status == 200:
                    return proc, url, log
        except OSError:
            pass
        assert time.monotonic() < deadline, "launcher.py serve did not answer"
        time.sleep(0.3)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_stream_stops_the_generation_and_answers_the_queue(sig):
    proc, url, log = _start(f"serve-{sig.name}.log")
    try:
        client = openai.OpenAI(base_url=url + "v1", api_key="unused", max_retries=0, timeout=120)
        stream = client.chat.completions.create(model="demo-smollm2", messages=LONG, max_tokens=100_000, stream=True)
        chunks = iter(stream)
        next(chunks)  # the generation runs
        waiter, queued = ask_in_thread(client, LONG)
        time.sleep(1.0)  # the second request waits its turn
        t0 = time.monotonic()
        proc.send_signal(sig)
        rest = 0
        try:
            for _ in chunks:
                rest += 1
        except (openai.APIConnectionError, openai.APIError):
            pass
        proc.wait(60)
        exit_s = time.monotonic() - t0
        waiter.join(30)
        print(f"\n{sig.name}: exited {exit_s:.2f} s after the signal (code {proc.returncode}); "
              f"{rest} chunks after it; queued request: {queued}")
        assert exit_s < 10, f"{sig.name}: still running {exit_s:.1f} s after the signal"
        assert queued.get("status") in (503, "closed"), queued
    finally:
        if proc.poll() is None:
            _stop(proc, log)
        else:
            log.close()


def test_a_half_sent_request_is_closed_after_the_header_deadline():
    proc, url, log = _start("serve-half-open.log")
    try:
        half_sent_closed_after("127.0.0.1", PORT)
        with urllib.request.urlopen(url + "v1/models", timeout=10) as r:  # whole requests still served
            assert r.status == 200
    finally:
        _stop(proc, log)
