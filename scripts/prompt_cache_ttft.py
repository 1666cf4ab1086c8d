#!/usr/bin/env python3
"""Time to first token of a conversation's second visit, with the prompt cache (``--cache-ram``, the default
budget) and without it (``--cache-ram 0``), through the real ``openai`` client against the real server.

Each round starts from an empty cache and sends conversation A's first turn, B's first turn, then A's second turn
(A's first turn, its reply and "Go on."), streamed at T = 0; the second visit's time to the first streamed token
is what is compared. The two conditions alternate round by round (on, off, off, on, …) so that the machine's
drift falls on both; medians are printed, with each visit's ``cached_tokens`` and ``timings.prompt_n``.

``python scripts/prompt_cache_ttft.py [--pair demo-qwen-coder] [--rounds 6] [--max-tokens 16]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.service.loading import app_state, prompt_cache, startup_pair  # noqa: E402
from app.server.serve import build  # noqa: E402
from app.service.ports import ephemeral_port  # noqa: E402

CODE = '''
def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals and return them sorted."""
    intervals = sorted(intervals, key=lambda iv: iv[0])
    merged = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
'''
OPENERS = {
    "a": "Review this module for bugs and explain each fix:\n" + CODE * 6 + "\nStart with the worst problem.",
    "b": "I keep a sourdough starter with rye flour in a cold kitchen. " * 30 + "How often should I feed it?",
}


def visit(client, messages: list, max_tokens: int, speculative: bool = True) -> tuple[float, str, dict]:
    """One streamed request: (seconds to the first content token, the reply, the final chunk's extras)."""
    t0, first, text, extra = time.perf_counter(), None, "", {}
    for chunk in client.chat.completions.create(model="", messages=messages, max_tokens=max_tokens, temperature=0,
                                                stream=True, stream_options={"include_usage": True},
                                                extra_body={"speculative": speculative}):
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter() - t0
            text += chunk.choices[0].delta.content
        if chunk.usage is not None:
            extra = {"cached": chunk.usage.prompt_tokens_details.cached_tokens, "prompt": chunk.usage.prompt_tokens,
                     **{k: chunk.model_extra["timings"][k] for k in ("prompt_n", "cache_restored_n")}}
    return first or float("nan"), text, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="demo-qwen-coder")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--plain", action="store_true", help="speculation off (default: the app's auto)")
    args = ap.parse_args()
    import openai
    import uvicorn

    state = app_state()
    startup_pair(state, args.pair, required=True)
    app, _ = build(state)
    port = ephemeral_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
    ttft: dict = {True: [], False: []}
    texts: dict = {True: set(), False: set()}
    order = [True, False, False, True] * ((args.rounds + 1) // 2)
    for on in order[:2 * args.rounds]:
        with state.generation_lock:
            state.prompt_cache = prompt_cache(None if on else 0)
            state.pair.reset()
        talks = {k: [{"role": "user", "content": v}] for k, v in OPENERS.items()}
        spec = not args.plain
        _, reply_a, _ = visit(client, talks["a"], args.max_tokens, spec)
        visit(client, talks["b"], args.max_tokens, spec)
        second = talks["a"] + [{"role": "assistant", "content": reply_a}, {"role": "user", "content": "Go on."}]
        seconds, text, extra = visit(client, second, args.max_tokens, spec)
        ttft[on].append(seconds)
        texts[on].add(text)
        print(f"cache {'on ' if on else 'off'}: second visit TTFT {seconds:.3f} s  {extra}", flush=True)
    server.should_exit = True
    on, off = statistics.median(ttft[True]), statistics.median(ttft[False])
    print(f"median TTFT of the second visit: cache on {on:.3f} s, off {off:.3f} s ({off / on:.1f}x), "
          f"{len(ttft[True])} runs each; replies identical across conditions: {texts[True] == texts[False]}")
    for cond, seen in texts.items():
        print(f"cache {'on' if cond else 'off'}: second visit's replies {sorted(seen)!r}")
    state.unload()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
