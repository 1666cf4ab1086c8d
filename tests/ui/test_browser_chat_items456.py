"""A user's Chat items in headless Chromium: a base (completion) model is named as one and gets a Completion mode
(item 4); a message waiting behind "Make it faster" says what it waits for, and the sweep says first what it
will do and about how long, shows its progress and stops (item 5); a reload mid-reply keeps the question and
the reply so far, marked interrupted, and Continue carries it on (item 6). Each state is saved as a screenshot
in ``test-artifacts/``, and its new texts are measured against WCAG AA (4.5:1)."""

from __future__ import annotations

import re

import pytest

from test_browser import browser, clear, open_page, open_tab, send, set_slider, shot  # noqa: F401
from test_browser_a11y import AA, CONTRAST_JS
from test_browser_chat_items import load_pair

pytestmark = pytest.mark.browser

GEMMA = ("gemma-3-270m.F32.gguf", "gemma-3-270m-q4_k_m.gguf")  # demo-gemma3: a base model, no chat template
SMOL = ("SmolLM2-135M-Instruct.F32.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
SOON = 30_000  # ms: what the page shows at once (a change of this work) is waited for this long, no longer


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 - the shared browser fixture
    pg = open_page(browser, width=1440, height=900)
    yield pg
    pg.close()


def says(page, selector: str, text: str, timeout: float = SOON) -> None:
    page.wait_for_function("([s, t]) => { const e = document.querySelector(s); return e && e.innerText.includes(t); }",
                           arg=[selector, text], timeout=timeout)


def low_contrast(page, selector: str) -> list:
    """Texts under 4.5:1 inside ``selector``, once it has faded in (Gradio fades an updated output in)."""
    page.wait_for_function("""(s) => { let o = 1; for (let e = document.querySelector(s); e; e = e.parentElement)
        o *= parseFloat(getComputedStyle(e).opacity); return o === 1; }""", arg=selector, timeout=SOON)
    page.wait_for_timeout(300)  # (and its text's own transitions)
    root = page.locator(selector).element_handle()
    return [t for t in page.evaluate(CONTRAST_JS, root) if t["ratio"] < AA]


def test_item4_a_base_model_is_named_and_continued_in_completion_mode(page):
    """demo-gemma3's target has no chat template: Chat says it is a base (completion) model, Completion mode is
    chosen, and a text is continued as it is (no "Assistant:" transcript), coloured by token as ever."""
    load_pair(page, *GEMMA)
    try:
        open_tab(page, "Chat")
        says(page, "#tdm-chat-kind", "is a base (completion) model")
        notice = page.inner_text("#tdm-chat-kind")
        assert "gemma-3-270m.F32.gguf" in notice and "no chat template" in notice, notice
        assert page.is_checked("#tdm-chat-mode input[value=completion]")  # the default for a base model
        assert not page.is_checked("#tdm-chat-mode input[value=chat]")  # chat mode stays offered
        clear(page)
        set_slider(page, "tdm-chat-max-tokens", 24)
        send(page, "The three primary colours are")
        page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=180_000)
        user = page.inner_text("#tdm-chatbot .tdm-msg-user")
        assert "continued as raw text" in user, user
        bot = page.inner_text("#tdm-chatbot .tdm-msg-bot .tdm-bubble")
        assert "Assistant:" not in bot and "User:" not in bot, bot
        assert page.locator("#tdm-chatbot .tdm-msg-bot .tdm-tok").count() > 3  # coloured by token
        assert page.inner_text("#tdm-chatbot .tdm-msg-bot .tdm-replyline")  # and its line of counts
        assert not low_contrast(page, "#tdm-chat-kind"), low_contrast(page, "#tdm-chat-kind")
        page.locator("#tdm-chat-kind").scroll_into_view_if_needed()
        shot(page, "chat-base-model-completion", full_page=False)
        page.locator("#tdm-chat-mode label", has_text="Chat").click()  # chat mode stays available
        assert page.is_checked("#tdm-chat-mode input[value=chat]")
    finally:
        load_pair(page, *SMOL)
    open_tab(page, "Chat")
    page.wait_for_function("(() => { const e = document.querySelector('#tdm-chat-kind');"
                           " return !e || !e.offsetParent || !e.innerText.trim(); })()", timeout=SOON)
    assert page.is_checked("#tdm-chat-mode input[value=chat]")  # an instruct target: Chat again


def test_item6_a_reload_mid_reply_keeps_the_question_and_the_partial_reply(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 2048)
    question = "Write a very long story about a dragon who learns to cook. Make it as long as you can."
    send(page, question)
    page.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-msg-bot .tdm-tok').length >= 12")
    page.wait_for_timeout(1500)  # the reply so far is kept as it streams (every second)
    page.reload()
    page.wait_for_selector("#tdm-chat-input textarea")
    page.wait_for_selector("#tdm-chatbot .tdm-interrupted", timeout=SOON)
    text = page.inner_text("#tdm-chatbot")
    assert question in text
    mark = page.inner_text("#tdm-chatbot .tdm-interrupted")
    assert "Interrupted" in mark and re.search(r"\(\d+ tokens kept\)", mark), mark
    kept = page.locator("#tdm-chatbot .tdm-msg-bot .tdm-tok").count()
    assert kept >= 8, kept  # the partial reply, coloured by token
    assert not low_contrast(page, "#tdm-chatbot"), low_contrast(page, "#tdm-chatbot")
    shot(page, "chat-reload-mid-reply", full_page=False)
    before = page.inner_text("#tdm-chatbot .tdm-msg-bot .tdm-bubble")
    set_slider(page, "tdm-chat-max-tokens", 16)
    page.click("#tdm-continue")  # carries the reply on from where it was cut
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=180_000)
    assert page.locator("#tdm-chatbot .tdm-msg-bot").count() == 1
    after = page.inner_text("#tdm-chatbot .tdm-msg-bot .tdm-bubble")
    assert after.startswith(before.rstrip()[:200]) and len(after) > len(before), (before, after)
    assert "continued after" in page.inner_text("#tdm-chatbot .tdm-msg-bot")
    assert page.locator("#tdm-chatbot .tdm-interrupted").count() == 0
    shot(page, "chat-continued-after-reload", full_page=False)
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 32)


def test_item5_make_it_faster_says_first_and_a_waiting_message_names_the_sweep(page):
    clear(page)
    page.click("#tdm-measure")  # a plain speed on record: the sweep's estimate comes from it
    page.wait_for_selector("#tdm-measure-note .tdm-status-ok", timeout=180_000)
    page.click("#tdm-faster")
    says(page, "#tdm-faster-plan", "quick sweep")
    plan = page.inner_text("#tdm-faster-plan")
    assert re.search(r"run a quick sweep: \d+ runs", plan), plan
    assert re.search(r"How long: ≈ \d+ (s|min) \(estimate: .*here", plan), plan
    assert page.is_visible("#tdm-faster-start") and page.is_visible("#tdm-faster-cancel")
    assert not low_contrast(page, "#tdm-faster-plan"), low_contrast(page, "#tdm-faster-plan")
    page.locator("#tdm-faster-plan").scroll_into_view_if_needed()
    shot(page, "chat-faster-plan", full_page=False)
    page.click("#tdm-faster-cancel")  # nothing ran: the plan is put away
    page.wait_for_selector("#tdm-faster-start", state="hidden")
    page.click("#tdm-faster")
    page.click("#tdm-faster-start")
    page.wait_for_selector("#tdm-faster-stop", state="visible")
    try:
        set_slider(page, "tdm-chat-max-tokens", 8)
        send(page, "Say hi.")
        note = "#tdm-chatbot .tdm-msg-user .tdm-replyline"
        says(page, note, "waiting for Make it faster's quick sweep", timeout=120_000)
        page.wait_for_function(f"/run \\d+ of \\d+/.test(document.querySelector('{note}').innerText)",
                               timeout=120_000)
        assert "reply above" not in page.inner_text("#tdm-chatbot")  # there is none
        says(page, "#tdm-chat-status", "Make it faster's quick sweep")
        assert not low_contrast(page, "#tdm-chatbot"), low_contrast(page, "#tdm-chatbot")
        shot(page, "chat-waiting-for-sweep", full_page=False)
        page.click("#tdm-faster-stop")
        page.wait_for_function("/stopped|Stopped/.test(document.querySelector('#tdm-measure-note').innerText)",
                               timeout=120_000)
        page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=120_000)  # then the message is answered
        assert page.locator("#tdm-chatbot .tdm-msg-bot .tdm-tok").count() > 0
        assert page.is_hidden("#tdm-faster-stop")
    finally:  # a sweep left running would hold the pair for the tests after this one
        if page.is_visible("#tdm-faster-stop"):
            page.click("#tdm-faster-stop")
            page.wait_for_selector("#tdm-faster-stop", state="hidden", timeout=120_000)
    shot(page, "chat-sweep-stopped", full_page=False)
    set_slider(page, "tdm-chat-max-tokens", 32)


def test_the_new_states_in_dark_mode(browser):  # noqa: F811
    pg = open_page(browser, "?__theme=dark", 1440, 900)
    try:
        assert pg.evaluate("document.body.classList.contains('dark')")
        pg.click("#tdm-faster")
        says(pg, "#tdm-faster-plan", "quick sweep")
        assert not low_contrast(pg, "#tdm-faster-plan"), low_contrast(pg, "#tdm-faster-plan")
        pg.click("#tdm-faster-cancel")
        clear(pg)
        set_slider(pg, "tdm-chat-max-tokens", 2048)
        send(pg, "Write a very long story about a lighthouse keeper.")
        pg.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-msg-bot .tdm-tok').length >= 12")
        pg.wait_for_timeout(1500)
        pg.reload()
        pg.wait_for_selector("#tdm-chatbot .tdm-interrupted", timeout=SOON)
        assert not low_contrast(pg, "#tdm-chatbot"), low_contrast(pg, "#tdm-chatbot")
        shot(pg, "chat-reload-mid-reply-dark", full_page=False)
        clear(pg)
        load_pair(pg, *GEMMA)
        try:
            open_tab(pg, "Chat")
            says(pg, "#tdm-chat-kind", "is a base (completion) model")
            assert not low_contrast(pg, "#tdm-chat-kind"), low_contrast(pg, "#tdm-chat-kind")
            assert not low_contrast(pg, "#tdm-chat-mode"), low_contrast(pg, "#tdm-chat-mode")
            shot(pg, "chat-base-model-dark", full_page=False)
        finally:
            load_pair(pg, *SMOL)
    finally:
        pg.close()
