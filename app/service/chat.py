"""Chat and compare as streams of plain data, shared by the UI's tabs, its ``/chat`` and ``/compare``
endpoints and the OpenAI-compatible API.

``chat_stream`` and ``compare_stream`` yield (status, lives) snapshots; ``chat_payload``/``compare_payload``
turn them into the JSON objects clients get. Settings: missing keys take the app's defaults, unknown keys
raise :class:`settings.SettingsError` naming them.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Optional, Sequence

from app.service import settings as S, speedup
from app.service.runner import Job, Live, RunStatus, stream
from app.service.state import AppState


def normalize_history(history: Any) -> list[dict]:
    """[{"role", "content"}, …] or [[user, assistant], …] → messages (text content only)."""
    if history in (None, ""):
        return []
    if not isinstance(history, list):
        raise S.SettingsError("history must be a list of {role, content} messages or [user, assistant] pairs")
    out: list[dict] = []
    for item in history:
        if isinstance(item, dict) and "role" in item and "content" in item:
            if item["role"] not in ("system", "user", "assistant"):
                raise S.SettingsError(f"unknown role in history: {item['role']!r}")
            out.append({"role": item["role"], "content": _text(item["content"])})
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            if item[0] is not None:
                out.append({"role": "user", "content": _text(item[0])})
            if item[1] is not None:
                out.append({"role": "assistant", "content": _text(item[1])})
        else:
            raise S.SettingsError(f"history entries must be {{role, content}} objects or pairs, not {item!r}"[:200])
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal-style [{"type": "text", "text": …}]
        return "".join(_text(part.get("text", "")) for part in content if isinstance(part, dict))
    if isinstance(content, dict) and "text" in content:
        return _text(content["text"])
    if content is None:
        return ""
    raise S.SettingsError(f"message content must be text, not {type(content).__name__}")


def user_text(value: Any, what: str = "message") -> str:
    """The text a user sent to be answered: a string with something in it, else SettingsError."""
    if not isinstance(value, str):
        raise S.SettingsError(f"the {what} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise S.SettingsError(f"the {what} is empty: nothing to answer")
    return value


def build_messages(history: list[dict], message: Optional[str], system: str) -> list[dict]:
    msgs = [m for m in history if m["role"] != "system"]
    head = [{"role": "system", "content": system}] if system.strip() else \
        [m for m in history if m["role"] == "system"][:1]
    tail = [{"role": "user", "content": message}] if message is not None else []
    return head + msgs + tail


def chat_stream(state: AppState, messages: list[dict], resolved: dict, stop: threading.Event
                ) -> Iterator[tuple[str, Live]]:
    cfg = S.to_config(resolved)
    for status, lives in stream(state, lambda pair: pair.chat_prompt(messages), [Job(cfg)], stop):
        yield status, lives[0]


def compare_stream(state: AppState, prompt: str, resolved: dict, stop: threading.Event, run_index: int
                   ) -> Iterator[tuple[str, Live, Live, str]]:
    """Plain and speculative runs of one prompt, each from a cold cache; the order alternates by run."""
    plain_cfg, spec_cfg = S.to_config(resolved, speculative=False), S.to_config(resolved, speculative=True)
    plain_first = run_index % 2 == 0
    jobs = [Job(plain_cfg, reset=True), Job(spec_cfg, reset=True)]
    if not plain_first:
        jobs.reverse()
    order = "plain, then speculative" if plain_first else "speculative, then plain"
    messages = build_messages([], prompt, resolved["system"])
    for status, lives in stream(state, lambda pair: pair.chat_prompt(messages), jobs, stop, judge=True):
        plain, spec = (lives[0], lives[1]) if plain_first else (lives[1], lives[0])
        yield status, plain, spec, order


def chat_payload(live: Live, status: str = RunStatus.DONE) -> dict:
    s = live.summary()
    claim = speedup.choose(s, live.speculative, None, {"tps": live.baseline_tps} if live.baseline_tps else None)
    return {
        "text": live.text,
        "acceptance_rate": s.acceptance_rate if live.speculative else None,
        "mean_accepted": s.mean_accepted,
        "tokens_per_s": s.tokens_per_s,
        "tokens": live.as_tokens(),
        "speculative": live.speculative,
        "speedup": claim["speedup"] if claim else None,  # the model's estimate; never with speculation off
        "speedup_kind": claim["kind"] if claim else None,
        "bound": s.bound if live.speculative else None,
        "baseline_tps": live.baseline_tps,
        "per_position": list(s.per_position),
        "paused_steps": s.paused_steps if live.speculative else None,  # target passes auto K drafted nothing
        "paused_reason": s.limit if live.speculative else None,  # why, in words (None while it drafted)
        "n_tokens": len(live.tokens),
        "reason": live.done.reason if live.done else None,
        "status": status,
        "error": live.error,
    }


def compare_payload(plain: Live, spec: Live, resolved: dict, order: str, prompt: str = "",
                    status: str = RunStatus.DONE) -> dict:
    ps, ss = plain.summary(), spec.summary()
    plain_ids = list(plain.done.tokens) if plain.done else [t.token for t in plain.tokens]
    spec_ids = list(spec.done.tokens) if spec.done else [t.token for t in spec.tokens]
    complete = plain.done is not None and spec.done is not None
    identical = complete and plain_ids == spec_ids
    p_tps, s_tps = ps.tokens_per_s, ss.tokens_per_s
    return {
        "plain_text": plain.text,
        "spec_text": spec.text,
        "identical": identical if complete else None,
        "first_difference": None if identical or not complete else first_difference(plain_ids, spec_ids),
        # the target's top-two gap there: a near-tie is rounding, not a fault (greedy runs only)
        "first_difference_gap": spec.parting.gap if spec.parting and not identical else None,
        "near_tie": spec.parting.near_tie if spec.parting and not identical else None,
        "speedup": s_tps / p_tps if p_tps and s_tps else None,
        "acceptance_rate": ss.acceptance_rate if ss.drafted else None,  # nothing drafted: no acceptance to show
        "mean_accepted": ss.mean_accepted,
        "drafted": ss.drafted,
        "steps": ss.steps,
        "paused_steps": ss.paused_steps,  # target passes of the speculative run where auto K drafted nothing
        "paused_reason": ss.limit,  # why, in words
        "plain_tps": p_tps,
        "spec_tps": s_tps,
        "plain_tokens": plain.as_tokens(),
        "spec_tokens": spec.as_tokens(),
        "temperature": resolved["temperature"],
        "order": order,
        "prompt": prompt,
        "status": status,
        "error": plain.error or spec.error,
    }


def first_difference(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """The first position where two token sequences differ (None when they are equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
