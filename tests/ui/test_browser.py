"""Drives the real app in headless Chromium: chat with replies coloured in place, the queue for messages sent
mid-reply, keys, Stop, honest speedups, the token inspector, the Pair lab's "Use this", dark mode, progress
indicators and screenshots of every tab (``test-artifacts/``)."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from support.ui_server import ARTIFACTS, app_url

pytestmark = pytest.mark.browser

CHROMIUM = next((p for p in (os.environ.get("TANDEM_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium")
                 if p and os.path.exists(p)), None)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
# Status trackers Gradio shows while an event runs (one per output it covers), counted by their timers.
PROGRESS_JS = """() => new Set(Array.from(document.querySelectorAll('.progress-text, .eta-bar'))
    .filter(e => e.offsetParent !== null).map(e => e.parentElement)).size"""
KINDS = ("accepted", "corrected", "bonus", "plain")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def open_page(browser, query: str = "", width: int = 1400, height: int = 1000):
    pg = browser.new_page(viewport={"width": width, "height": height})
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    pg.set_default_timeout(120_000)
    pg.goto(app_url() + query)
    pg.wait_for_selector("#tdm-chat-input textarea")
    pg.wait_for_selector("#tdm-header .tdm-ready", state="attached")  # the load handler has set every control
    pg.wait_for_function(f"({PROGRESS_JS})() === 0")  # nothing is loading any more
    return pg


@pytest.fixture(scope="module")
def page(browser):
    pg = open_page(browser)
    yield pg
    pg.close()


def shot(page, name: str, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def set_slider(page, elem_id: str, value: int, accordion: str = "tdm-chat-sampling") -> None:
    if not page.locator(f"#{elem_id}").is_visible():
        page.click(f"#{accordion}")  # open the Sampling accordion
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def clear(page) -> None:
    """Clear the chat and wait until it is empty, so later waits cannot match the previous reply."""
    if not page.locator("#tdm-clear").is_visible():  # a test before this one ended on another tab
        open_tab(page, "Chat")
    page.click("#tdm-clear")
    page.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-msg').length == 0")
    page.wait_for_function("!document.querySelector('#tdm-chat-status .tdm-status-ok')")


def send(page, text: str) -> None:
    page.fill("#tdm-chat-input textarea", text)
    page.click("#tdm-send")


def replies(page) -> int:
    return page.locator("#tdm-chatbot .tdm-msg-bot").count()


def wait_replies(page, n: int) -> None:
    page.wait_for_function(f"document.querySelectorAll('#tdm-chatbot .tdm-msg-bot .tdm-replyline').length >= {n}"
                           " && !document.querySelector('#tdm-chatbot .tdm-cursor')")


def open_tab(page, name: str) -> None:
    """Click a tab, through the "More tabs" menu where a narrow screen folds it away."""
    tab = page.get_by_role("tab", name=name)
    if not tab.is_visible():
        page.get_by_role("button", name="More tabs").click()
        exact = re.compile(rf"^\s*{re.escape(name)}\s*$")  # not "Rescan models" for "Models"
        tab = page.locator(".overflow-menu button:visible, button:visible", has_text=exact).last
    tab.click()


def setting(page, name: str, value: str, expect: str = "", back: str = "Chat") -> None:
    """Type one of the shared generation settings (Pair settings), wait until Chat's read-only line shows
    ``expect``, then go back to the tab ``back`` (none: stay)."""
    open_tab(page, "Pair settings")
    box = page.locator(f"#tdm-gen-{name} textarea, #tdm-gen-{name} input").first
    box.fill(value)
    box.press("Tab")  # the change is sent when the field loses focus
    if expect:
        settings_say(page, expect)
    if back:
        open_tab(page, back)


def settings_say(page, text: str, timeout: float = 60_000) -> None:
    """Wait until Chat's read-only settings line includes ``text``; on a timeout, say what it showed."""
    from playwright.sync_api import TimeoutError as Timeout

    try:
        page.wait_for_function("t => document.querySelector('#tdm-chat-settings').innerText.includes(t)", arg=text,
                               timeout=timeout)
    except Timeout as exc:
        shown = page.inner_text("#tdm-chat-settings")
        raise AssertionError(f"Chat's settings line never said {text!r}; it says {shown!r}") from exc


def proposer(page, label: str, says: str) -> None:
    """Pick the proposer labelled ``label`` in Pair settings; Chat's settings line then names it as ``says``."""
    open_tab(page, "Pair settings")
    # the whole label: "draft model" is also inside "tree (the draft model, with branches)"
    page.locator("#tdm-gen-proposer label", has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")).click()
    settings_say(page, f"Pair settings): {says}")
    open_tab(page, "Chat")


AUTO = ("auto (both, per step)", "auto")  # the default proposer: its label, and how the settings line says it


def choose(page, elem_id: str, option: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(option)
    page.locator("ul[role=listbox] li", has_text=option).first.click()


def test_chat_reply_is_coloured_in_place_with_a_line_under_it(page):
    clear(page)
    proposer(page, "draft model", "the draft model")  # every drafted token from one drafter, numbered from pass 1
    setting(page, "k", "4", "K 4")  # a fixed K drafts whatever the machine's load (auto K may pause)
    set_slider(page, "tdm-chat-max-tokens", 32)
    send(page, "Name three fruits.")
    page.wait_for_selector("#tdm-chatbot .tdm-msg-bot .tdm-tok")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")  # finished
    kinds = page.eval_on_selector_all("#tdm-chatbot .tdm-msg-bot .tdm-tok", "els => els.map(e => e.className)")
    assert kinds and all("tdm-tok tdm-" in k for k in kinds)
    assert any("tdm-accepted" in k or "tdm-corrected" in k or "tdm-bonus" in k for k in kinds)
    assert page.get_attribute("#tdm-chatbot .tdm-tok", "data-s") == "1"  # target passes count from 1
    line = page.inner_text("#tdm-chatbot .tdm-replyline")
    assert "accepted" in line and "target passes for" in line and "tok/s" in line, line
    legend = page.inner_text("#tdm-legend")
    for label in ("accepted draft", "target-corrected", "bonus", "plain", "wavy underline"):
        assert label in legend
    counters = page.inner_text("#tdm-counters")
    for label in ("tokens/s", "acceptance", "tokens / pass", "mean K", "draft position"):
        assert label in counters
    page.click("#tdm-glossary")  # "What these numbers mean" opens on a tap, not only on hover
    page.wait_for_selector("#tdm-glossary .tdm-glossary")
    assert "Draft length" in page.inner_text("#tdm-glossary")
    page.click("#tdm-glossary")
    shot(page, "chat-finished")
    setting(page, "k", "auto", "K auto")
    proposer(page, *AUTO)


def test_enter_sends_and_shift_enter_adds_a_line(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 8)
    box = page.locator("#tdm-chat-input textarea")
    box.fill("")
    box.type("First line")
    box.press("Shift+Enter")
    box.type("second line")
    assert box.input_value() == "First line\nsecond line"
    assert page.locator("#tdm-chatbot .tdm-msg-user").count() == 0  # nothing was sent
    box.press("Enter")
    page.wait_for_selector("#tdm-chatbot .tdm-msg-user")
    assert page.inner_text("#tdm-chatbot .tdm-msg-user .tdm-bubble") == "First line\nsecond line"
    assert box.input_value() == ""
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")


def test_a_message_sent_mid_stream_is_queued_and_answered(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 96)
    send(page, "Write a short story about a dragon who learns to cook.")
    page.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-msg-bot .tdm-tok').length >= 4")
    send(page, "Now name three colours.")
    page.wait_for_function("document.querySelector('#tdm-chatbot .tdm-queued') && "
                           "/queued/i.test(document.querySelector('#tdm-chat-status').innerText)")
    shot(page, "chat-queued")
    wait_replies(page, 2)
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    users = page.eval_on_selector_all("#tdm-chatbot .tdm-msg-user", "els => els.map(e => e.innerText)")
    assert [u.strip() for u in users] == ["Write a short story about a dragon who learns to cook.",
                                          "Now name three colours."]
    assert page.locator("#tdm-chatbot .tdm-queued").count() == 0 and replies(page) == 2


def test_stop_ends_a_long_generation(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 2048)
    send(page, "Write a very long story about a dragon who learns to cook. Make it as long as you can.")
    page.wait_for_function("document.querySelectorAll('#tdm-chatbot .tdm-tok').length >= 8")
    shot(page, "chat-streaming")
    page.click("#tdm-stop")
    try:
        page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=20000)
    except Exception:
        shot(page, "debug-stop")
        raise AssertionError(page.inner_text("#tdm-chat-status"))
    assert "Stopped" in page.inner_text("#tdm-chat-status")
    n = page.locator("#tdm-chatbot .tdm-tok").count()
    assert 0 < n < 2048
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


def test_speedup_is_measured_or_labelled_and_never_shown_with_speculation_off(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 32)
    send(page, "Name three fruits.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    page.click("#tdm-measure")
    page.wait_for_selector("#tdm-measure-note .tdm-status-info, #tdm-measure-note .tdm-status-ok, "
                           "#tdm-measure-note .progress-text")
    assert page.evaluate(PROGRESS_JS) <= 1  # one indicator for the one operation
    page.wait_for_selector("#tdm-measure-note .tdm-status-ok")
    counters = page.inner_text("#tdm-counters")
    assert "speedup, measured" in counters and "plain run of the same prompt" in counters, counters
    assert "(measured)" in page.inner_text("#tdm-chatbot .tdm-replyline")
    page.click("#tdm-chat-speculative input")  # speculation off
    try:
        send(page, "Name three vegetables.")
        wait_replies(page, 2)
        page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
        counters = page.inner_text("#tdm-counters")
        labels = page.eval_on_selector_all("#tdm-counters .tdm-stat-label", "els => els.map(e => e.innerText)")
        assert labels == ["tokens/s"] and "×" not in counters and "Speculation is off" in counters, counters
        line = page.locator("#tdm-chatbot .tdm-replyline").last.inner_text()
        assert line.startswith("plain decoding") and "saved" not in line, line
        assert page.locator("#tdm-chatbot .tdm-msg-bot").last.locator(".tdm-plain").count() > 0
    finally:
        page.click("#tdm-chat-speculative input")


def test_a_corrected_token_opens_an_inspector_with_the_drafts_token(page):
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 48)
    proposer(page, "prompt lookup", "prompt lookup")  # lookup drafts often go wrong
    try:
        send(page, "Count from one to twelve in words, separated by commas: one, two, three, four, five, six")
        page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
        corrected = page.locator("#tdm-chatbot .tdm-corrected[data-d]")
        assert corrected.count() > 0, page.inner_text("#tdm-chatbot")
        tok = corrected.first
        draft, target = tok.get_attribute("data-d"), tok.get_attribute("data-t")
        tok.click()
        page.wait_for_selector("#tdm-inspector:not([hidden])")
        text = page.inner_text("#tdm-inspector")
        assert "target-corrected" in text and "prompt lookup proposed" in text and "target chose" in text, text
        assert "∅" not in text, text  # a special token is named, not shown as nothing
        assert draft in text and target in text
        shot(page, "chat-inspector", full_page=False)
        page.keyboard.press("Escape")
    finally:
        proposer(page, *AUTO)


def test_compare_replays_both_runs_as_a_race(page):
    page.get_by_role("tab", name="Compare").click()
    set_slider(page, "tdm-compare-max-tokens", 32, accordion="tdm-compare-sampling")
    page.fill("#tdm-compare-prompt textarea", "List five tips for writing clear emails.")
    page.click("#tdm-compare-run")
    page.wait_for_selector("#tdm-compare-arena .tdm-race-wrap")
    lanes = page.locator("#tdm-compare-arena .tdm-lane")
    assert lanes.count() == 2
    first = page.locator("#tdm-compare-arena .tdm-lane[data-first=true] .tdm-finish")
    page.wait_for_function("el => getComputedStyle(el).visibility === 'visible'", arg=first.element_handle())
    assert "finished first" in first.inner_text()
    assert "speedup, measured" in page.inner_text("#tdm-compare-result")
    assert "the plain rate" in page.inner_text("#tdm-compare-arena .tdm-saving")  # saved (or lost) per token
    shot(page, "compare-race")
    page.get_by_role("tab", name="Chat").click()


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
    finally:
        job.cancel()  # the app stops the abandoned generation within one step and frees the pair
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    assert page.locator("#tdm-chatbot .tdm-msg-bot .tdm-tok").count() > 0


def test_use_this_changes_the_next_chat_message_without_a_reload(page):
    """A quick sweep in the Pair lab (one progress indicator), then "Use this": the open Chat shows the new K
    and its next reply drafts with it; the quick sweep alone changed nothing."""
    page.get_by_role("tab", name="Benchmark").click()
    page.get_by_label("Drafts").fill("SmolLM2-135M-Instruct.Q4_1")
    page.get_by_label("K values").fill("3")
    page.get_by_label("Tokens per run").fill("16")
    page.get_by_role("button", name="Run sweep").click()
    page.wait_for_function("document.querySelectorAll('.progress-text').length > 0")
    assert page.evaluate(PROGRESS_JS) == 1
    page.wait_for_selector("text=does not change the saved defaults")
    shot(page, "bench-quick-sweep")
    page.get_by_role("button", name="Use this").click()
    page.wait_for_selector("#tdm-use-status :text('now use')")
    note = page.inner_text("#tdm-use-status")
    page.get_by_role("tab", name="Chat").click()
    speculative = page.is_checked("#tdm-chat-speculative input")
    assert speculative == ("speculation off" not in note), note
    if speculative:
        assert page.input_value("#tdm-gen-k textarea, #tdm-gen-k input") == "3"
        settings_say(page, "K 3")
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 24)
    send(page, "Name three fruits.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    line = page.inner_text("#tdm-chatbot .tdm-replyline")
    assert ("(K 3)" in line) if speculative else line.startswith("plain decoding"), line
    setting(page, "k", "auto", "K auto")


def test_dark_mode_styles_each_kind_distinctly_beyond_colour(browser):
    pg = open_page(browser, "?__theme=dark", 1440, 900)
    try:
        assert pg.evaluate("document.body.classList.contains('dark')")
        styles = pg.evaluate("""kinds => kinds.map(k => {
            const s = getComputedStyle(document.querySelector('#tdm-legend .tdm-swatch.tdm-' + k));
            return [s.backgroundColor, s.textDecorationLine, s.textDecorationStyle, s.outlineStyle];
        })""", list(KINDS))
        assert len({tuple(s) for s in styles}) == 4, styles  # all four differ
        cues = {(s[1], s[2], s[3], s[0] in ("rgba(0, 0, 0, 0)", "transparent")) for s in styles}
        assert len(cues) == 4, styles  # and still differ with the colours taken away
        shot(pg, "chat-dark-1440x900", full_page=False)
    finally:
        pg.close()


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


def test_screenshots_of_every_tab_on_desktop_and_phone(page):
    """test-artifacts/tab-<name>-<w>x<h>.png, referenced by docs/app.md ("Screenshots")."""
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", 48)
    send(page, "Write a Python function that reverses a string.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok")
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for tab in ("Chat", "Compare", "Pair settings", "Models", "Benchmark"):
            open_tab(page, tab)
            page.wait_for_timeout(300)
            shot(page, f"tab-{tab.split()[0].lower()}-{width}x{height}", full_page=False)
            assert (ARTIFACTS / f"tab-{tab.split()[0].lower()}-{width}x{height}.png").stat().st_size > 10_000
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.get_by_role("tab", name="Chat").click()
