"""Chat and compare as streams of plain data, shared by the UI's tabs, its ``/chat`` and ``/compare``
endpoints and the OpenAI-compatible API.

``chat_stream`` and ``compare_stream`` yield (status, lives) snapshots; ``chat_payload``/``compare_payload``
turn them into the JSON objects clients get. Settings: missing keys take the app's defaults, unknown keys
raise :class:`settings.SettingsError` naming them.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterator, Optional, Sequence

from app.engine.events import StrEnum
from app.service import settings as S, speedup
from app.service.runner import Job, Live, PromptFn, RunStatus, stream
from app.service.state import Activity, AppState


class ChatMode(StrEnum):
    """How the Chat tab turns the text box into a prompt."""

    CHAT = "chat"  # the conversation through the target's chat template
    COMPLETION = "completion"  # the text continued as it is: no template, no turns (base models)


# words in a model's name or fine-tune field that say it was tuned to follow turns
_TUNED = re.compile(r"instruct|chat|(^|[^a-z])it([^a-z]|$)|sft|dpo|rlhf|assistant", re.IGNORECASE)


def base_model(state: AppState) -> Optional[str]:
    """A sentence saying why the loaded target is a base (completion) model, or None: its GGUF carries no chat
    template (the fact that decides: Chat mode would fall back to a "User: … Assistant:" transcript), and
    whether its name or fine-tune metadata names any chat or instruction tuning."""
    pair = state.pair
    if pair is None or pair.target.chat_template():
        return None
    t = pair.target
    name = t.meta("general.name") or t.path.name
    tuned = _TUNED.search(" ".join(x for x in (name, t.meta("general.finetune"), t.path.name) if x))
    why = ("its name says it was tuned for chat, but the file carries no chat template" if tuned else
           "its file carries no chat template and its name names no chat or instruction tuning")
    return (f"The loaded target, {name} ({t.path.name}), is a base (completion) model: {why}. In Chat mode it "
            "only continues a plain \"User: … Assistant:\" transcript and often repeats it; Completion mode "
            "continues your text as it is.")


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


def chat_stream(state: AppState, messages: list[dict], resolved: dict, stop: threading.Event,
                who: str = "an API client's reply", reply_start: str = "") -> Iterator[tuple[str, Live]]:
    """``who``: what others waiting meanwhile are told holds the pair; ``reply_start``: the start of the reply,
    already written (Continue), which the model carries on from."""
    def prompt(pair) -> list[int]:
        ids = pair.chat_prompt(messages)
        return ids + (pair.target.tokenize(reply_start, add_special=False, parse_special=False)
                      if reply_start else [])

    for status, lives in _marked(state, stream(state, prompt, [Job(S.to_config(resolved))], stop), who):
        yield status, lives[0]


def completion_stream(state: AppState, text: str, resolved: dict, stop: threading.Event,
                      who: str = "an API client's reply") -> Iterator[tuple[str, Live]]:
    """``text`` continued as raw text: no chat template, and typed control-token text stays text."""
    prompt: PromptFn = lambda pair: pair.completion_prompt(text, special=False)  # noqa: E731
    for status, lives in _marked(state, stream(state, prompt, [Job(S.to_config(resolved))], stop), who):
        yield status, lives[0]


def _marked(state: AppState, snapshots: Iterator[tuple[RunStatus, list[Live]]], who: str
            ) -> Iterator[tuple[RunStatus, list[Live]]]:
    """The runner's snapshots; from the jobs' start to their end, ``who`` names what holds the pair
    (state.activity), for those waiting meanwhile."""
    mark: Optional[Activity] = None
    try:
        for status, lives in snapshots:
            if mark is None and status == RunStatus.RUNNING:
                mark = state.activity = Activity(who)
            yield status, lives
    finally:
        if mark is not None and state.activity is mark:
            state.activity = None


def compare_stream(state: AppState, prompt: str, resolved: dict, stop: threading.Event, run_index: int,
                   who: str = "a Compare run") -> Iterator[tuple[str, Live, Live, str]]:
    """Plain and speculative runs of one prompt, each from a cold cache; the order alternates by run."""
    plain_cfg, spec_cfg = S.to_config(resolved, speculative=False), S.to_config(resolved, speculative=True)
    plain_first = run_index % 2 == 0
    jobs = [Job(plain_cfg, reset=True), Job(spec_cfg, reset=True)]
    if not plain_first:
        jobs.reverse()
    order = "plain, then speculative" if plain_first else "speculative, then plain"
    messages = build_messages([], prompt, resolved["system"])
    for status, lives in _marked(state, stream(state, lambda pair: pair.chat_prompt(messages), jobs, stop,
                                               judge=True), who):
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
        # how far batched passes moved the target's top-two gaps along the same text (what a near-tie is judged by)
        "first_difference_rounding": spec.parting.rounding if spec.parting and not identical else None,
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
