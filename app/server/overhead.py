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
import statistics
import threading
import time
import urllib.request
from typing import Optional

import uvicorn

from app.engine.loop import run as run_engine
from app.lab.prompts import builtin_suite
from app.server.serve import build
from app.service import settings as S
from app.service.loading import app_state, say, startup_pair
from app.service.ports import ephemeral_port
from app.service.state import AppState


def _start_server(state: AppState) -> tuple[str, uvicorn.Server]:
    app, _ = build(state)
    port = ephemeral_port()
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
        out.update(n=len(tokens), wall_tps=len(tokens) / wall, decode_tps=stats.tokens_per_s)

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
    rows: list[dict] = []
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

    out: dict = {"runs": len(rows), "max_tokens": max_tokens}
    for key in ("wall_tps", "decode_tps"):
        out[f"direct_{key}"] = statistics.median(row["direct"][key] for row in rows)
        out[f"server_{key}"] = statistics.median(row["server"][key] for row in rows)
        out[f"overhead_{key}"] = quartiles([1 - row["server"][key] / row["direct"][key] for row in rows])
    return out


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main(rounds: int, max_tokens: int = 128, pair_id: Optional[str] = None) -> int:
    state = app_state(cache_ram_mib=0)  # both paths from a cold cache: no saved prompt state put back
    startup_pair(state, pair_id, required=True)
    url, server = _start_server(state)
    say(f"timing {rounds} round(s) of direct vs server runs, {max_tokens} tokens each, interleaved")
    try:
        res = measure(state, url, rounds, max_tokens)
    finally:
        server.should_exit = True
        state.unload()
    print(f"runs: {res['runs']} pairs ({max_tokens} tokens, T = 0, speculative with the app's defaults)")
    for key, label in (("wall_tps", "whole request"), ("decode_tps", "decode only  ")):
        q1, q2, q3 = res[f"overhead_{key}"]
        print(f"{label} tokens/s: direct {res[f'direct_{key}']:.1f}, server {res[f'server_{key}']:.1f}; "
              f"overhead {q2:+.1%} (median of per-pair ratios; quartiles {q1:+.1%} .. {q3:+.1%})")
    return 0
