"""Drives the real app in headless Chromium: chat with the live panel, legend, counters, Stop."""

from __future__ import annotations

import os
import shutil

import pytest

from ui_server import ARTIFACTS, app_url

pytestmark = pytest.mark.browser

CHROMIUM = next((p for p in (os.environ.get("TANDEM_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium")
                 if p and os.path.exists(p)), None)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]


@pytest.fixture(scope="module")
def page():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    url = app_url()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        dialogs: list[str] = []
        pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        pg.dialogs = dialogs
        pg.set_default_timeout(120_000)
        pg.goto(url)
        pg.wait_for_selector("#tdm-chat-input textarea")
        yield pg
        browser.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def set_slider(page, elem_id: str, value: int) -> None:
    if not page.locator(f"#{elem_id}").is_visible():
        page.click("#tdm-chat-sampling")  # open the Sampling accordion
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def clear(page) -> None:
    """Clear the chat and wait until the panel is empty, so later waits cannot match the previous reply."""
    page.click("#tdm-clear")
    page.wait_for_function("document.querySelectorAll('#tdm-panel .tdm-tok').length == 0")
    page.wait_for_function("!document.querySelector('#tdm-chat-status .tdm-status-ok')")


def send(page, text: str) -> None:
    page.fill("#tdm-chat-input textarea", text)
    page.click("#tdm-send")


def test_chat_streams_coloured_tokens_with_legend_and_counters(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 32)
    send(page, "Name three fruits.")
    page.wait_for_selector("#tdm-panel .tdm-tok")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")  # finished
    kinds = page.eval_on_selector_all("#tdm-panel .tdm-tok", "els => els.map(e => e.className)")
    assert kinds and all("tdm-" in k for k in kinds)
    assert any("tdm-accepted" in k or "tdm-corrected" in k or "tdm-bonus" in k for k in kinds)
    title = page.get_attribute("#tdm-panel .tdm-tok", "title")
    assert title.startswith("step 0")
    legend = page.inner_text("#tdm-legend")
    for label in ("accepted draft", "target-corrected", "bonus", "plain"):
        assert label in legend
    counters = page.inner_text("#tdm-counters")
    for label in ("tokens/s", "acceptance", "tokens / pass"):
        assert label in counters
    assert "baseline" in counters.lower()
    assert page.locator("#tdm-chatbot").inner_text().strip()
    shot(page, "chat-finished")


def test_stop_ends_a_long_generation(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 2048)
    send(page, "Write a very long story about a dragon who learns to cook. Make it as long as you can.")
    page.wait_for_function("document.querySelectorAll('#tdm-panel .tdm-tok').length >= 8")
    shot(page, "chat-streaming")
    page.click("#tdm-stop")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    status = page.inner_text("#tdm-chat-status")
    assert "Stopped" in status, status
    n = page.locator("#tdm-panel .tdm-tok").count()
    assert 0 < n < 2048
    shot(page, "chat-stopped")
    set_slider(page, "tdm-chat-max-tokens", 32)


def test_model_and_user_text_is_shown_not_run(page):
    payload = "<script>alert(1)</script><img src=x onerror=alert(1)>"
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 8)
    send(page, f"Repeat exactly: {payload}")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    assert payload in page.locator("#tdm-chatbot").inner_text()
    assert page.locator("#tdm-chatbot img[src=x]").count() == 0
    assert page.dialogs == []
    shot(page, "chat-escaped")


def test_a_second_client_waits_its_turn_and_is_told(page):
    """While another client (here: the API) generates, a chat from the page says it is waiting, then runs."""
    from gradio_client import Client

    other = Client(app_url(), verbose=False)
    job = other.submit("Write a very long story about a lighthouse.", [],
                       {"temperature": 0, "max_tokens": 2048}, api_name="/chat")
    try:
        next(iter(job))  # the other generation is under way
        clear(page)
        set_slider(page, "tdm-chat-max-tokens", 8)
        send(page, "Say hi.")
        page.wait_for_selector("#tdm-chat-status .tdm-status-wait")
        assert "Waiting for another generation" in page.inner_text("#tdm-chat-status")
        shot(page, "chat-waiting")
    finally:
        job.cancel()  # the app stops the abandoned generation within one step and frees the pair
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    assert page.locator("#tdm-panel .tdm-tok").count() > 0


def choose(page, elem_id: str, option: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(option)
    page.locator("ul[role=listbox] li", has_text=option).first.click()


def test_pair_settings_refuse_an_incompatible_draft_and_keep_the_pair(page):
    page.get_by_role("tab", name="Pair settings").click()
    page.wait_for_selector("#tdm-pairinfo table")
    before = page.inner_text("#tdm-pairinfo")
    assert "Backend" in before and "MiB" in before
    assert "GPU layers:" in before and "layers placed on the GPU" in before  # the choice and what was placed
    choose(page, "tdm-draft", "gemma-3-270m-q4_k_m.gguf")
    page.wait_for_selector("#tdm-verdict .tdm-status-error")
    assert "Refused" in page.inner_text("#tdm-verdict")
    page.click("#tdm-load")
    page.wait_for_selector("#tdm-pair-status .tdm-status-error")
    assert "previous pair is still loaded" in page.inner_text("#tdm-pair-status")
    shot(page, "pair-refused")
    choose(page, "tdm-draft", "SmolLM2-135M-Instruct.Q4_1.gguf")
    page.wait_for_selector("#tdm-verdict .tdm-status-ok")
    page.get_by_role("tab", name="Chat").click()
    clear(page)
    send(page, "Say hi.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")  # the previous pair still answers
