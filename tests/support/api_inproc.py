"""The OpenAI-compatible API served in this process (``serve.build``, real uvicorn on a free port) over the
session's demo pair, for tests that drive it with the real ``openai`` client."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from app.server.serve import build
from app.service.ports import ephemeral_port
from app.service.state import AppState
from support.api_greedy import assert_same_greedy_text, greedy


class Served:
    def __init__(self, pair, pair_id: str = "demo-smollm2", wrap=None):
        """``wrap``: an ASGI wrapper put around the app (support.asgi_record.Recorder keeps what was asked)."""
        import uvicorn

        self.state = AppState(pair=pair, pair_id=pair_id)
        app, _ = build(self.state)
        self.app = wrap(app) if wrap else app
        port = ephemeral_port()
        self.url = f"http://127.0.0.1:{port}/"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.05)

    def client(self):
        import openai

        return openai.OpenAI(base_url=self.url + "v1", api_key="unused", max_retries=0, timeout=300)

    def get(self, path: str, method: str = "GET") -> tuple[int, dict, bytes]:
        req = urllib.request.Request(self.url + path.lstrip("/"), method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def close(self) -> None:
        # a client that hung up stops its generation within a step, after its response has ended: wait for it,
        # or the pair (closed next by its fixture) is freed under a running decode
        if self.state.generation_lock.acquire(timeout=120):
            self.state.generation_lock.release()
        self.server.should_exit = True
        self.thread.join(timeout=10)


def assert_spec_equals_plain(client, extra: dict) -> dict:
    """A greedy completion with the speculative settings ``extra`` chose the target's tokens, equals plain
    decoding's up to a near-tie (support.api_greedy) and drafted; its ``stats``."""
    kw = dict(model="", prompt="Once upon a time", max_tokens=24)  # "": the loaded pair, whatever its id
    plain = greedy(client.completions.create, **kw, extra_body={"speculative": False})
    spec = greedy(client.completions.create, **kw, extra_body=extra)
    assert_same_greedy_text(plain.choices[0].text, spec, f"speculative ({extra}) against plain")
    stats = spec.model_extra["stats"]
    assert stats["speculative"] and stats["total_draft_tokens_count"] > 0
    return stats
