"""Issue 22 in headless Chromium: a long reply scrolls inside the chat panel, speedup figures agree, Compare says
why the draft was paused, the colour switch, Stop, the sweep's progress bar and the settings' ranges. Each state
is saved as a screenshot in ``test-artifacts/``."""

from __future__ import annotations

import re

import pytest

from test_browser import browser, clear, open_page, open_tab, send, set_slider, shot  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 - the shared browser fixture
    pg = open_page(browser, width=1440, height=900)
    yield pg
    pg.close()


def box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def test_a_long_reply_scrolls_inside_the_chat_panel(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 400)
    send(page, "Write a very long story about a dragon who learns to cook. Make it as long as you can.")
    page.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-tok').length >= 120")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=180_000)
    chat, field = box(page, "#tdm-chatbot"), box(page, "#tdm-chat-input")
    stop, status = box(page, "#tdm-stop"), box(page, "#tdm-chat-status")
    assert chat["y"] + chat["height"] <= field["y"] + 1, (chat, field)  # nothing drawn under the message box
    assert chat["y"] + chat["height"] <= stop["y"] + 1 and chat["y"] + chat["height"] <= status["y"] + 1
    # the panel follows the stream in the animation frame after each update (app/ui/style.py): let it run
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    sizes = page.eval_on_selector("#tdm-chatbot", "w => [w.scrollHeight, w.clientHeight, w.scrollTop, "
                                                  "getComputedStyle(w).overflowY]")
    scroll_h, client_h, top, overflow = sizes
    assert overflow in ("auto", "scroll") and scroll_h > client_h + 50, sizes  # the panel scrolls
    assert scroll_h - top - client_h < 60, sizes  # and followed the stream to the end
    last = box(page, "#tdm-chatbot .tdm-msg-bot .tdm-replyline")
    assert chat["y"] <= last["y"] and last["y"] + last["height"] <= chat["y"] + chat["height"] + 1
    shot(page, "chat-long-reply-scrolls", full_page=False)
    set_slider(page, "tdm-chat-max-tokens", 32)


def test_speedup_figures_on_screen_agree_within_5_percent(page):
    clear(page)  # no reply: Measure plain speed stores this machine's plain speed
    page.click("#tdm-measure")
    page.wait_for_selector("#tdm-measure-note .tdm-status-ok")
    set_slider(page, "tdm-chat-max-tokens", 48)
    send(page, "Name three fruits.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    text = page.inner_text("#tdm-counters") + "\n" + page.inner_text("#tdm-chatbot .tdm-replyline")
    figures = [float(x) for x in re.findall(r"(\d+\.\d+)×", text)]
    reply_tps = float(page.inner_text("#tdm-counters .tdm-stat-value >> nth=0"))
    plain = re.search(r"\(([\d.]+) tok/s\)", text)
    assert figures and plain, text
    figures.append(reply_tps / float(plain.group(1)))  # the reply's tok/s over the plain speed shown beside it
    assert max(figures) <= min(figures) * 1.05, (figures, text)
    shot(page, "chat-speedup-agrees", full_page=False)
    set_slider(page, "tdm-chat-max-tokens", 32)
