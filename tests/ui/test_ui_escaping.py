"""Model text never becomes markup: it is escaped before any HTML is built from it."""

from __future__ import annotations

import html as htmllib
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.engine.events import DoneEvent, StepEvent, TokenEvent
from app.engine.llama.promptcache import Recall
from app.engine.summary import Summary
from app.service import chat
from app.ui import panel, reply
from app.ui.tabs import chat as chat_tab
from app.service.settings import resolve
from app.service.state import AppState

PAYLOAD = "<script>alert(1)</script><img src=x onerror=alert(1)>"


def pieces(text: str, size: int = 5) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@dataclass
class FakeTarget:
    n_ctx: int = 4096
    path: Path = Path("fake.gguf")
    size_bytes: int = 1
    n_threads: int = 1
    decoded: int = 0  # tokens decoded so far (the runner counts a prompt's reused tokens from it)

    def missing(self, tokens) -> int:
        return len(tokens)  # nothing cached


class FakePair:
    """Streams PAYLOAD as tokens of every kind, the way the engine's event stream does."""

    draft_kind = None  # no draft model (the runner names the drafter of a reply's drafted tokens from it)

    def __init__(self):
        self.target = FakeTarget()
        self.draft = None

    def proposer_kind(self, cfg):
        return cfg.proposer

    def chat_prompt(self, messages):
        return [1, 2, 3]

    def reset(self):
        pass

    def recall(self, prompt, cache) -> Recall:
        return Recall(0)  # no prompt cache: every token is read

    def generate(self, prompt, cfg, stop=None, baseline_tps=None, on_prefill=None):
        if on_prefill is not None:
            on_prefill(0.0)  # the prompt read at once
        kinds = ["accepted", "corrected", "bonus", "plain"]
        for i, text in enumerate(pieces(PAYLOAD)):
            yield TokenEvent(token=100 + i, text=text, kind=kinds[i % 4], step=i, draft_pos=0, draft_prob=0.5,
                             index=i)
            yield StepEvent(step=i, drafted=1, accepted=1, emitted=1, t_draft=0.001, t_verify=0.001, k=1)
        yield DoneEvent(reason="eog", stats=Summary(tokens_per_s=100.0, acceptance_rate=1.0, mean_accepted=1.0),
                        tokens=tuple(range(100, 100 + len(pieces(PAYLOAD)))))


def streamed_tokens() -> list:
    return [TokenEvent(token=100 + i, text=t, kind="accepted", step=i) for i, t in enumerate(pieces(PAYLOAD))]


def streamed_html() -> tuple[str, str]:
    state = AppState(pair=FakePair())
    settings = resolve({"temperature": 0, "max_tokens": 64})
    live = None
    for _, live in chat.chat_stream(state, [{"role": "user", "content": "x"}], settings, threading.Event()):
        pass
    assert live.text == PAYLOAD
    return reply.render(reply.compact(live.tokens)), panel.counters_html(live.summary(), True, None)


def test_streamed_tokens_are_escaped_in_the_reply():
    html, _ = streamed_html()
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert htmllib.unescape(re.sub(r"<[^>]+>", "", html)).strip() == PAYLOAD  # all of it, as text
    spans = reply.spans_html(reply.compact(streamed_tokens()))
    assert "<script" not in spans.lower() and htmllib.unescape(re.sub(r"<[^>]+>", "", spans)) == PAYLOAD


def test_attributes_and_chat_messages_are_escaped():
    tok = TokenEvent(token=1, text='"><b onmouseover=alert(1)>', kind='corrected"><script>', step=0, index=0)
    for html in (reply.render(reply.compact([tok], {0: '"><i onclick=x>'})),
                 reply.spans_html(reply.compact([tok], {0: '"><i onclick=x>'}))):
        assert "<b " not in html and "<script>" not in html and "<i " not in html
    shown = chat_tab.display([{"role": "user", "content": PAYLOAD}, {"role": "assistant", "content": PAYLOAD}],
                             queued=[PAYLOAD])
    assert "<script" not in shown.lower() and "<img" not in shown.lower()
    assert shown.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3
    history = panel.history_html([{"prompt": PAYLOAD, "speedup": 1.0}])
    assert "<script" not in history and "<img" not in history


def test_markdown_links_cannot_run_script():
    html = reply.render([{"t": "[x](javascript:alert(1)) ![i](x.png) <b>y</b>", "k": "accepted", "s": 0}])
    assert 'href="javascript' not in html and "<img" not in html and "<b>" not in html


def test_payload_renders_as_text_in_a_browser():
    """The panel HTML in headless Chromium: the payload is visible text, no script runs, no image loads."""
    chromium = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    html, counters = streamed_html()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.set_content(f"<html><head>{panel.HEAD}</head><body><style>{panel.CSS}</style>{panel.legend_html()}"
                         f'<div class="tdm-conv">{html}</div>{counters}</body></html>')
        page.click(".tdm-conv .tdm-corrected")  # the inspector builds its text with textContent only
        page.wait_for_timeout(300)  # give an injected handler the chance to fire (it must not)
        assert page.inner_text(".tdm-conv").strip() == PAYLOAD
        assert page.locator(".tdm-conv img").count() == 0
        assert page.locator(".tdm-conv script").count() == 0
        assert page.is_visible("#tdm-inspector")
        assert dialogs == []
        browser.close()
