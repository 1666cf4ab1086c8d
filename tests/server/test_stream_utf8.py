"""A reply cut by ``max_tokens`` inside a character: whole characters only, streamed or not, chat or completion,
and ``finish_reason: length`` (once: the reply ended in U+FFFD, half an emoji). The demo pair over the real
HTTP API, with emoji and CJK text whose characters take several tokens each."""

from __future__ import annotations

import json
import urllib.request

import pytest

from app.engine.decoding.text import Utf8Stream

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

PROMPT = "Reply only with emojis: \U0001f600\U0001f389\U0001f680\U0001f525 and Chinese: \u4f60\u597d\u4e16\u754c"


def post(api, path: str, body: dict) -> str:
    req = urllib.request.Request(api.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode("utf-8")


def reply(api, chat: bool, max_tokens: int, stream: bool) -> tuple[str, str]:
    """(text, finish_reason) of one greedy request."""
    path = "v1/chat/completions" if chat else "v1/completions"
    body = {"model": "demo-smollm2", "max_tokens": max_tokens, "temperature": 0, "stream": stream,
            **({"messages": [{"role": "user", "content": PROMPT}]} if chat else {"prompt": PROMPT + "\n"})}
    raw = post(api, path, body)
    if not stream:
        choice = json.loads(raw)["choices"][0]
        return (choice["message"]["content"] if chat else choice["text"]) or "", choice["finish_reason"]
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    choices = [c["choices"][0] for c in chunks if c["choices"]]
    text = "".join((c["delta"].get("content") or "") if chat else c["text"] for c in choices)
    return text, [c["finish_reason"] for c in choices if c["finish_reason"]][-1]


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completion"])
def test_a_reply_cut_inside_a_character_ends_in_whole_characters(api, chat):
    texts = []
    for max_tokens in range(1, 10):
        text, finish = reply(api, chat, max_tokens, stream=False)
        streamed, streamed_finish = reply(api, chat, max_tokens, stream=True)
        assert "\ufffd" not in text and "\ufffd" not in streamed, (max_tokens, text, streamed)
        assert streamed == text and finish == streamed_finish == "length"
        texts.append(text)
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    cut_inside = [n for n, (a, b) in enumerate(zip(texts, texts[1:]), 1) if a == b]
    assert cut_inside, "no cut fell inside a character: choose a prompt whose reply has multi-token characters"


def test_a_text_that_ends_inside_a_character_drops_it_and_bad_bytes_are_replaced_at_once():
    stream = Utf8Stream()
    assert stream.feed("a\U0001f600".encode()[:3]) == "a"
    stream.flush()  # the end: the held-back half character is dropped
    assert stream.feed(b"\xff") == "\ufffd" and stream.feed("\u00e9".encode()) == "\u00e9"
