"""The plain-decoding baseline of the loaded pair on this machine (for the live speedup and bound)."""

from __future__ import annotations

import statistics
from dataclasses import replace

from app.engine.loop import GenConfig
from app.engine.decoding.sampling import SamplerSettings
from app.lab.bench import measure
from app.service.settings import to_config
from app.service.state import AppState

PROMPT = [{"role": "user", "content": "Explain in a few paragraphs how a lighthouse keeper spent a stormy night."}]


def measure_baseline(state: AppState, tokens: int = 64, repeats: int = 2) -> dict:
    """Median plain tokens/s over ``repeats`` cold-cache runs after a short warm-up; stored per pair+machine."""
    with state.generation_lock:
        pair = state.pair
        if pair is None:
            raise RuntimeError("no pair is loaded")
        ids = pair.chat_prompt(PROMPT)
        greedy = SamplerSettings(temperature=0.0)
        measure(pair, ids, GenConfig(max_tokens=8, sampler=greedy, speculative=False), forget=False)  # warm-up
        runs = [measure(pair, ids, GenConfig(max_tokens=tokens, sampler=greedy, speculative=False), forget=False)
                for _ in range(repeats)]
        tps = statistics.median(r.tps for r in runs)
        n = int(statistics.median(len(r.tokens) for r in runs))
        pair.reset(lookup=False)  # (a chat's lookup memory stays)
        return state.save_baseline(tps, n)


def warm_up(state: AppState, tokens: int = 8) -> None:
    """A few tokens of plain and speculative decoding, so the first timed run is not a cold one."""
    with state.generation_lock:
        pair = state.pair
        if pair is None:
            return
        ids = pair.chat_prompt([{"role": "user", "content": "Hello"}])
        greedy = SamplerSettings(temperature=0.0)
        for spec in (False, True):
            measure(pair, ids, GenConfig(max_tokens=tokens, sampler=greedy, speculative=spec), forget=False)
        pair.reset(lookup=False)  # (a chat's lookup memory stays)


def measure_plain(state: AppState, messages: list[dict], resolved: dict, tokens: int) -> dict:
    """Plain decoding of a chat prompt with the reply's own sampling settings, for as many tokens as the
    reply had: the measured reference for that reply's speedup. Stored as the pair's plain speed too."""
    with state.generation_lock:
        pair = state.pair
        if pair is None:
            raise RuntimeError("no pair is loaded")
        ids = pair.chat_prompt(messages)
        cfg = replace(to_config(resolved, speculative=False), max_tokens=max(int(tokens), 1))
        run = measure(pair, ids, cfg, forget=False)
        pair.reset(lookup=False)  # (a chat's lookup memory stays)
        if not run.tokens:
            raise RuntimeError("the plain run produced no tokens")
        return state.save_baseline(run.tps, len(run.tokens))
