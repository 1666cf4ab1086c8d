"""``launcher.py serve --overhead N``: what the server path costs over the engine's own tokens/s.

In one process: the pair is loaded, the API is served on a free loopback port, and for each chat prompt of the
built-in suite and each of N rounds, a direct engine run and the same request streamed through the server
(``/v1/chat/completions``, SSE, read with the standard library) alternate, each from a cold KV cache, at
temperature 0 with the app's speculative defaults. Reported: medians of tokens/s over the whole request (prompt
processing included, HTTP and SSE included for the server) and of decode-only tokens/s (the engine's own figure
and what the server reports in ``timings``), and the overhead = 1 − server / direct, median of per-run ratios.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
import urllib.request
from typing import Optional

from app.engine.backend import LoadOptions
from app.engine.bench import builtin_suite
from app.engine.loop import run as run_engine
from app.ui import settings as S
from app.ui.state import AppState


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(state: AppState) -> tuple[str, object]:
    import uvicorn

    from app.ui.openai_server import build

    app, _ = build(state)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    threading.Thread(target=server.run, name="tandem-api", daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return url, server
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the API server did not start")


def _cold(state: AppState) -> None:
    with state.generation_lock:
        state.pair.reset()


def direct(state: AppState, messages: list, resolved: dict) -> dict:
    """One engine run of the chat prompt in a fresh thread, as the runner does it (on this machine libgomp's
    spinning made runs in the main thread several times slower under load), timed from the start."""
    out: dict = {}

    def work() -> None:
        with state.generation_lock:
            pair = state.pair
            pair.reset()
            cfg = S.to_config(resolved)
            t0 = time.perf_counter()
            tokens, stats = run_engine(pair.target, pair.chat_prompt(messages), cfg, pair.proposer(cfg))
            wall = time.perf_counter() - t0
        out.update(n=len(tokens), wall_tps=len(tokens) / wall, decode_tps=stats["tokens_per_s"])

    worker = threading.Thread(target=work, name="tandem-direct")
    worker.start()
    worker.join()
    return out


def through_server(state: AppState, url: str, messages: list, max_tokens: int) -> dict:
    """The same generation streamed through /v1/chat/completions; the whole request timed by the client."""
    _cold(state)
    body = json.dumps({"messages": messages, "temperature": 0, "max_tokens": max_tokens, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    last: Optional[dict] = None
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                last = json.loads(line[6:])
    wall = time.perf_counter() - t0
    if not last or "usage" not in last:
        raise RuntimeError(f"unexpected end of stream: {last}")
    n = last["usage"]["completion_tokens"]
    return {"n": n, "wall_tps": n / wall, "decode_tps": last["timings"]["predicted_per_second"]}


def measure(state: AppState, url: str, rounds: int, max_tokens: int) -> dict:
    prompts = [p for p in builtin_suite() if p.messages is not None]
    resolved = S.resolve({"temperature": 0, "max_tokens": max_tokens}, S.defaults(state.defaults))
    rows = []
    for r in range(rounds):
        for i, p in enumerate(prompts):
            if (r + i) % 2 == 0:
                d = direct(state, p.messages, resolved)
                s = through_server(state, url, p.messages, max_tokens)
            else:
                s = through_server(state, url, p.messages, max_tokens)
                d = direct(state, p.messages, resolved)
            if d["n"] != s["n"]:
                raise RuntimeError(f"{p.id}: {d['n']} tokens direct but {s['n']} through the server")
            rows.append({"prompt": p.id, "direct": d, "server": s})

    def med(side: str, key: str) -> float:
        return statistics.median(row[side][key] for row in rows)

    return {
        "runs": len(rows), "max_tokens": max_tokens,
        "direct_wall_tps": med("direct", "wall_tps"), "server_wall_tps": med("server", "wall_tps"),
        "direct_decode_tps": med("direct", "decode_tps"), "server_decode_tps": med("server", "decode_tps"),
        "overhead_wall": statistics.median(1 - r["server"]["wall_tps"] / r["direct"]["wall_tps"] for r in rows),
        "overhead_decode": statistics.median(1 - r["server"]["decode_tps"] / r["direct"]["decode_tps"]
                                             for r in rows),
    }


def main(rounds: int, max_tokens: int = 128, pair_id: Optional[str] = None) -> int:
    from app.ui.app import say, startup_pair

    state = AppState(target_options=LoadOptions(n_ctx=4096, n_gpu_layers=-1))
    startup_pair(state, pair_id)
    if state.pair is None:
        return 1
    url, server = _start_server(state)
    say(f"timing {rounds} round(s) of direct vs server runs, {max_tokens} tokens each, interleaved")
    try:
        res = measure(state, url, rounds, max_tokens)
    finally:
        server.should_exit = True
        state.unload()
    print(f"runs: {res['runs']} ({max_tokens} tokens, T = 0, speculative with the app's defaults)")
    print(f"whole request tokens/s   direct {res['direct_wall_tps']:.1f}   server {res['server_wall_tps']:.1f}"
          f"   overhead {res['overhead_wall']:+.1%}")
    print(f"decode-only tokens/s     direct {res['direct_decode_tps']:.1f}   server {res['server_decode_tps']:.1f}"
          f"   overhead {res['overhead_decode']:+.1%}")
    return 0
