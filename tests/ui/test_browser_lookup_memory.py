"""Issue 50 item 2 in headless Chromium: the same question asked again after New chat no longer copies the first
reply (lookup searches this conversation alone), and with "Lookup remembers earlier replies" on it does, and the
panel and the reply line say how many tokens were copied, beside the speedup. New chat turns the choice off again.
Screenshots: ``test-artifacts/lookup-memory-off.png``, ``lookup-memory-on.png``, ``lookup-memory-on-dark.png``,
``lookup-memory-checkbox.png``."""

from __future__ import annotations

import re

import pytest

from support.ui_server import ARTIFACTS
from test_browser import (AUTO, browser, clear, open_page, proposer, send, set_slider, setting,  # noqa: F401
                          shot, wait_replies)

pytestmark = pytest.mark.browser

QUESTION = "Write a Python function that says whether a number is prime."
MEMORY = "#tdm-chat-lookup-memory input[type=checkbox]"


def ask(page) -> str:
    """The question in a new chat; the reply's line of counts."""
    send(page, QUESTION)
    wait_replies(page, 1)
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=180_000)
    return page.inner_text("#tdm-chatbot .tdm-msg-bot .tdm-replyline")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_repeated_question_copies_the_first_reply_only_when_asked_and_says_so(browser, theme):
    pg = open_page(browser, "?__theme=dark" if theme == "dark" else "", 1366, 900)
    try:
        proposer(pg, AUTO[0], AUTO[1])
        setting(pg, "k", "12", expect="K 12")  # a fixed K: a long match is taken whatever the timings
        clear(pg)
        set_slider(pg, "tdm-chat-max-tokens", 64)
        ask(pg)  # the first time
        clear(pg)  # New chat
        line = ask(pg)
        found = re.search(r"\((\d+) from lookup", line)  # what lookup found in this conversation alone
        assert found is None or int(found.group(1)) < 24, f"a new chat copied the first reply: {line}"
        assert "copied" not in line and "copied" not in pg.inner_text("#tdm-counters"), line
        assert not pg.is_checked(MEMORY)
        if theme == "light":
            shot(pg, "lookup-memory-off", full_page=False)

        pg.check(MEMORY)
        clear(pg)
        pg.check(MEMORY)  # New chat turned it off: on again for this conversation
        if theme == "light":
            pg.locator("#tdm-chat-lookup-memory").screenshot(path=str(ARTIFACTS / "lookup-memory-checkbox.png"))
        line = ask(pg)
        copied = re.search(r"(\d+) of them copied from an earlier reply", line)
        assert copied and int(copied.group(1)) >= 12, line
        panel = pg.inner_text("#tdm-counters")
        assert f"{copied.group(1)} of this reply's" in panel and "copied by prompt lookup from an earlier reply" in panel
        pg.locator("#tdm-counters").scroll_into_view_if_needed()
        shot(pg, "lookup-memory-on" + ("-dark" if theme == "dark" else ""), full_page=False)
        clear(pg)
        assert not pg.is_checked(MEMORY)  # a new conversation starts clean
    finally:
        pg.close()
