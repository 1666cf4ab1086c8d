"""Hostile requests against the real app's server (the UI's, where /v1 is mounted beside Gradio): other
origins and forged Hosts get 403, oversized bodies 413 at once, an 80,000-turn chat 400 before the lock, and
none of them runs a generation; the UI's own requests and the openai client still work."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from support.ui_server import app_url

openai = pytest.importorskip("openai")
gradio_client = pytest.importorskip("gradio_client")

ASK = [{"role": "user", "content": "Hi"}]


def _post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _generations(base: str) -> float:
    with urllib.request.urlopen(base + "metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tandem_generations_total"))


@pytest.fixture(scope="module")
def base():
    url = app_url()
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "v1/models", timeout=10).close()
            return url
        except (OSError, urllib.error.HTTPError):
            assert time.monotonic() < deadline, "/v1/models never answered"
            time.sleep(0.2)


def test_cross_origin_text_plain_post_is_refused_and_runs_nothing(base):
    before = _generations(base)
    body = json.dumps({"model": "demo-smollm2", "messages": ASK, "max_tokens": 4}).encode()
    status, err = _post(base + "v1/chat/completions", body,
                        {"Content-Type": "text/plain", "Origin": "https://evil.example"})
    assert status == 403 and err["error"]["code"] == "forbidden" and "evil.example" in err["error"]["message"]
    assert _generations(base) == before


def test_forged_host_is_refused(base):
    body = json.dumps({"model": "demo-smollm2", "prompt": "The sky is", "max_tokens": 2}).encode()
    status, err = _post(base + "v1/completions", body, {"Content-Type": "application/json",
                                                          "Host": "rebind.evil.example"})
    assert status == 403 and "rebind.evil.example" in err["error"]["message"]


def test_same_origin_and_clients_still_work(base):
    own = base.rstrip("/")
    body = json.dumps({"model": "demo-smollm2", "prompt": "The sky is", "max_tokens": 2, "temperature": 0}).encode()
    status, out = _post(base + "v1/completions", body, {"Content-Type": "application/json", "Origin": own})
    assert status == 200 and out["usage"]["completion_tokens"] == 2
    client = openai.OpenAI(base_url=base + "v1", api_key="unused", max_retries=0, timeout=120)
    assert client.completions.create(model="demo-smollm2", prompt="Hi", max_tokens=2).usage.completion_tokens == 2
    assert gradio_client.Client(base, verbose=False).view_api(return_format="dict")  # the UI's own routes


def test_big_body_by_content_length_is_refused_before_reading(base):
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.putrequest("POST", "/v1/chat/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(50 << 20))
    conn.endheaders()
    conn.send(b"{" + b" " * 1000)  # the rest never comes: the answer must not wait for it
    resp = conn.getresponse()
    err = json.loads(resp.read())
    conn.close()
    assert resp.status == 413 and err["error"]["code"] == "request_too_large"


def test_big_chunked_body_is_refused_at_the_cap(base):
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    chunk = b" " * (1 << 20)

    def body():
        yield b"{"
        for _ in range(20):  # 20 MiB, past the default 8 MiB
            yield chunk

    try:
        conn.request("POST", "/v1/chat/completions", body=body(), encode_chunked=True,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the server closed the connection instead of answering 413")
    err = json.loads(resp.read())
    conn.close()
    assert resp.status == 413 and err["error"]["code"] == "request_too_large"


def test_80000_turns_are_refused_before_the_lock_and_hi_is_answered(base):
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word"} for i in range(80_000)]
    big = json.dumps({"model": "demo-smollm2", "messages": turns, "max_tokens": 2}).encode()
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(
        big=_post(base + "v1/chat/completions", big, {"Content-Type": "application/json"})))
    t.start()
    client = openai.OpenAI(base_url=base + "v1", api_key="unused", max_retries=0, timeout=120)
    hi = client.chat.completions.create(model="demo-smollm2", messages=ASK, max_tokens=2)
    t.join(120)
    assert hi.usage.completion_tokens >= 1
    status, err = result["big"]
    assert status == 400 and "80000 messages" in err["error"]["message"] and "4096" in err["error"]["message"]
