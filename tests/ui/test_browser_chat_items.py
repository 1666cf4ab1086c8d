"""Issue 22 in headless Chromium, the Chat and Compare items: Compare says when and why the draft was paused, the
colour switch, Stop, settings refused with their range (in one place, Pair settings), a conversation kept
across a reload, Regenerate at T = 0, the header naming target and draft, and Compare's Markdown. Each state is
saved as a screenshot in ``test-artifacts/``."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from test_browser import (PROGRESS_JS, browser, choose, clear, open_page, open_tab, send,  # noqa: F401
                          set_slider, setting, shot, wait_replies)

pytestmark = pytest.mark.browser

F32, Q4 = "SmolLM2-135M-Instruct.F32.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"
WRONG = "tiny-random-smollm2-vocab.gguf"  # written for one test, then removed
TRANSPARENT = ("rgba(0, 0, 0, 0)", "transparent")


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 - the shared browser fixture
    pg = open_page(browser, width=1440, height=900)
    yield pg
    pg.close()


def load_pair(page, target: str, draft: str) -> None:
    open_tab(page, "Pair settings")
    choose(page, "tdm-target", target)
    choose(page, "tdm-draft", draft)
    page.wait_for_selector("#tdm-verdict .tdm-status-ok")
    page.click("#tdm-load")
    page.wait_for_selector("#tdm-pair-status .tdm-status-ok", timeout=180_000)


def show_settings(page) -> None:
    """Scroll Pair settings to the generation settings: the refusal above the fields."""
    page.locator("#tdm-gen-status").evaluate("e => { e.scrollIntoView({block: 'start'}); window.scrollBy(0, -90); }")


def status_text(page) -> str:
    return page.inner_text("#tdm-chat-status")


def test_the_header_names_target_and_draft(page):
    header = page.inner_text("#tdm-header")
    assert re.search(r"target SmolLM2-135M-Instruct F32 · draft SmolLM2-135M-Instruct Q4_1 · \w+", header), header


def test_compare_says_when_and_why_the_draft_was_paused(page):
    """A draft that is never right (random weights with the target's vocabulary) cannot pay on any machine, however
    fast it drafts: auto K pauses, and Compare says so and why, as Chat does; the /compare endpoint carries the same.
    (A pair whose pause rests on timings, such as the F32 model drafting for its own Q4_1, pays on some CPUs.)"""
    from gradio_client import Client

    from support.tinyeagle3 import write_llama
    from support.ui_server import app_url

    models = Path(os.environ["TANDEM_HOME"]) / "models"  # the folder the app's models folder links to
    wrong = write_llama(models / WRONG, vocab_from=models / Q4, seed=7)
    try:
        page.reload()  # the pair lists are read from the models folder when a page loads
        page.wait_for_selector("#tdm-header .tdm-ready", state="attached")
        page.wait_for_function(f"({PROGRESS_JS})() === 0")
        load_pair(page, Q4, WRONG)
        header = page.inner_text("#tdm-header")
        assert "target SmolLM2-135M-Instruct Q4_1 · draft" in header, header
        setting(page, "k", "auto", "K auto", back="Compare")
        set_slider(page, "tdm-compare-max-tokens", 64)
        page.fill("#tdm-compare-prompt textarea", "Summarise the water cycle in three sentences.")
        page.click("#tdm-compare-run")
        page.wait_for_selector("#tdm-compare-result .tdm-stats", timeout=180_000)
        result = page.inner_text("#tdm-compare-result")
        pause = page.inner_text("#tdm-compare-result .tdm-pause")
        assert re.search(r"(paused \(K = 0\) for \d+ of \d+ target passes|Nothing was drafted)", pause), result
        assert re.search(r"target passes: \S", pause), pause  # and why, in words
        if "Nothing was drafted" in pause:  # no figure pretends it ran
            assert "0%" not in result and "speculation cost" not in page.inner_text("#tdm-compare-arena .tdm-note")
        page.locator("#tdm-compare-result").scroll_into_view_if_needed()
        shot(page, "compare-paused-reason", full_page=False)
        out = Client(app_url(), verbose=False).predict(
            "Summarise the water cycle in three sentences.", {"k": "auto", "max_tokens": 48}, api_name="/compare")
        assert out["paused_steps"] > 0 and out["paused_reason"], out
    finally:
        load_pair(page, F32, Q4)
        wrong.unlink(missing_ok=True)
        open_tab(page, "Chat")


def test_unticking_colour_tokens_removes_the_tints_of_old_and_new_replies(page):
    clear(page)
    setting(page, "k", "4", "K 4")  # a fixed K: the reply has accepted (tinted) tokens
    set_slider(page, "tdm-chat-max-tokens", 24)
    send(page, "Name three fruits.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    backgrounds = "els => els.map(e => getComputedStyle(e).backgroundColor)"
    before = page.eval_on_selector_all("#tdm-chatbot .tdm-tok", backgrounds)
    assert any(b not in TRANSPARENT for b in before), before
    page.click("#tdm-colour input")  # off
    try:
        old = page.eval_on_selector_all("#tdm-chatbot .tdm-tok", backgrounds)
        assert old and all(b in TRANSPARENT for b in old), old  # the reply already shown
        send(page, "Name three colours.")
        wait_replies(page, 2)
        page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
        new = page.locator("#tdm-chatbot .tdm-msg-bot").nth(1).evaluate(
            "e => Array.from(e.querySelectorAll('.tdm-tok')).map(t => getComputedStyle(t).backgroundColor)")
        assert new and all(b in TRANSPARENT for b in new), new  # and the next one
        decorations = page.eval_on_selector_all("#tdm-chatbot .tdm-tok",
                                                "els => els.map(e => getComputedStyle(e).textDecorationLine)")
        assert set(decorations) == {"none"}, set(decorations)
        shot(page, "chat-colour-off", full_page=False)
    finally:
        page.click("#tdm-colour input")  # on again: the tints come back
    again = page.eval_on_selector_all("#tdm-chatbot .tdm-tok", backgrounds)
    assert any(b not in TRANSPARENT for b in again), again
    setting(page, "k", "auto", "K auto")


def test_stop_ends_in_stopped_with_the_count_within_5_s_every_time(page):
    set_slider(page, "tdm-chat-max-tokens", 2048)
    try:
        for attempt in range(3):
            clear(page)
            send(page, "Write a very long story about a dragon who learns to cook. Make it as long as you can.")
            page.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-tok').length >= 8")
            t0 = time.monotonic()
            page.click("#tdm-stop")
            page.wait_for_function("/Stopped · \\d+ tokens/.test(document.querySelector('#tdm-chat-status').innerText)",
                                   timeout=5000)
            print(f"stop {attempt + 1}: {status_text(page)!r} after {time.monotonic() - t0:.2f} s")
            page.wait_for_timeout(1000)  # and it stays so (no late "Stopping…" overwrites it)
            assert re.search(r"Stopped · \d+ tokens", status_text(page)), status_text(page)
        shot(page, "chat-stopped", full_page=False)
    finally:
        set_slider(page, "tdm-chat-max-tokens", 32)


def test_out_of_range_settings_are_refused_with_the_range_named(page):
    open_tab(page, "Pair settings")
    k_box = page.locator("#tdm-gen-k textarea, #tdm-gen-k input").first
    try:
        setting(page, "k", "0", back="")
        page.wait_for_selector("#tdm-gen-status .tdm-status-error")
        assert "K must be auto or a whole number from 1–64 (got '0')" in page.inner_text("#tdm-gen-status")
        assert k_box.input_value() == "0"  # refused, not changed into another value
        show_settings(page)
        shot(page, "settings-k-refused", full_page=False)
        open_tab(page, "Chat")
        assert "K must be" in page.inner_text("#tdm-chat-settings")  # Chat reads the same settings
        clear(page)
        send(page, "Say hi.")
        page.wait_for_selector("#tdm-chat-status .tdm-status-error")
        assert "K must be auto or a whole number from 1–64" in status_text(page)
        assert page.input_value("#tdm-chat-input textarea") == "Say hi."  # the message is not lost
        shot(page, "chat-settings-refused", full_page=False)
        setting(page, "k", "auto", "K auto", back="")
        for value in ("-1", "9"):
            setting(page, "temperature", value, back="")
            page.wait_for_function("v => { const t = document.querySelector('#tdm-gen-status').innerText;"
                                   " return t.includes('Temperature') && t.includes(v); }", arg=value)
            text = page.inner_text("#tdm-gen-status")
            assert "Temperature must be between 0 and 5" in text and value in text, text
            assert page.input_value("#tdm-gen-temperature input") == value
        show_settings(page)
        shot(page, "settings-temperature-refused", full_page=False)
        setting(page, "temperature", "0", "T = 0", back="")
        page.wait_for_function("!document.querySelector('#tdm-gen-status .tdm-status-error')")
        page.locator("#tdm-ctx input").fill("10")
        page.click("#tdm-load")
        page.wait_for_selector("#tdm-pair-status .tdm-status-error", timeout=60_000)
        assert "context size must be between 32 and 1048576 (got 10)" in page.inner_text("#tdm-pair-status")
        assert page.input_value("#tdm-ctx input") == "10"
        page.locator("#tdm-ctx input").fill("4096")
        open_tab(page, "Chat")
        set_slider(page, "tdm-chat-max-tokens", 0)
        page.fill("#tdm-chat-input textarea", "")
        send(page, "Say hi.")
        page.wait_for_function("document.querySelector('#tdm-chat-status').innerText.includes('Max tokens')")
        assert "Max tokens must be between 1 and 1048576 (got 0)" in status_text(page)
    finally:
        setting(page, "k", "auto", back="")
        setting(page, "temperature", "0", back="")
        page.locator("#tdm-ctx input").fill("4096")
        open_tab(page, "Chat")
        set_slider(page, "tdm-chat-max-tokens", 32)
        page.fill("#tdm-chat-input textarea", "")


def test_a_reload_keeps_the_conversation_and_new_chat_starts_afresh(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 24)
    send(page, "Name three rivers.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    before = page.inner_text("#tdm-chatbot")
    kinds = page.eval_on_selector_all("#tdm-chatbot .tdm-tok", "els => els.map(e => e.className)")
    page.reload()
    page.wait_for_selector("#tdm-chatbot .tdm-msg-bot")
    assert page.inner_text("#tdm-chatbot") == before
    assert page.eval_on_selector_all("#tdm-chatbot .tdm-tok", "els => els.map(e => e.className)") == kinds
    page.wait_for_function("document.querySelector('#tdm-counters').innerText.includes('reloaded')")
    assert "No reply yet" not in page.inner_text("#tdm-counters")  # the replies above are there
    shot(page, "chat-after-reload", full_page=False)
    set_slider(page, "tdm-chat-max-tokens", 24)  # (a reload shows the default reply length again)
    page.click("#tdm-regen")  # the restored conversation is the one the app answers from
    page.wait_for_function("/deterministic/.test(document.querySelector('#tdm-chat-status').innerText)")
    assert "T = 0 is deterministic: the same reply" in status_text(page)
    assert page.locator("#tdm-chatbot .tdm-msg-bot").count() == 1
    shot(page, "chat-regenerate-t0", full_page=False)
    clear(page)  # "New chat"
    page.reload()
    page.wait_for_selector("#tdm-chatbot .tdm-conv-empty")
    assert page.locator("#tdm-chatbot .tdm-msg").count() == 0


def test_compare_renders_markdown_not_raw_fences(page):
    open_tab(page, "Compare")
    set_slider(page, "tdm-compare-max-tokens", 64)
    page.fill("#tdm-compare-prompt textarea", "Write a Python function that reverses a string.")
    page.click("#tdm-compare-run")
    page.wait_for_selector("#tdm-compare-arena .tdm-race-wrap", timeout=180_000)
    lanes = page.locator("#tdm-compare-arena .tdm-lane")
    page.wait_for_function("el => getComputedStyle(el).visibility === 'visible'",
                           arg=page.locator("#tdm-compare-arena .tdm-finish").last.element_handle())
    page.wait_for_timeout(500)
    text = page.inner_text("#tdm-compare-arena")
    assert "```" not in text, text
    assert lanes.first.locator("pre code, p").count() > 0  # rendered Markdown, coloured by token
    assert lanes.first.locator(".tdm-tok").count() > 0
    shot(page, "compare-markdown", full_page=False)
    open_tab(page, "Chat")
