"""Tree drafts in headless Chromium (#52): with proposer tree and a fixed K the Chat's panel draws the tree of the
last tree step — the chain, each branch under the token it stood beside, the kept path marked and said in words —
its texts at WCAG AA (4.5:1) in light and dark mode; screenshots in ``test-artifacts/``."""

from __future__ import annotations

import pytest

from test_browser import (browser, clear, open_page, proposer, send, set_slider, setting, shot,  # noqa: F401
                          wait_replies, AUTO)
from test_browser_chat_items456 import low_contrast

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 - the shared browser fixture
    pg = open_page(browser, width=1440, height=900)
    yield pg
    pg.close()


def test_the_panel_draws_the_last_steps_tree_and_the_path_the_target_kept(page, browser):  # noqa: F811
    setting(page, "k", "4", "K 4")  # a fixed K offers branches wherever the draft is unsure
    proposer(page, "tree (the draft model, with branches)", "the drafter's tree")
    try:
        clear(page)
        set_slider(page, "tdm-chat-max-tokens", 64)
        send(page, "Write a short poem about the sea and the wind.")
        wait_replies(page, 1)
        page.wait_for_selector("#tdm-counters .tdm-tree", timeout=60_000)
        head = page.inner_text("#tdm-counters .tdm-tree .tdm-chart-title")
        assert head.startswith("Tree of pass ") and " branch" in head and "then added its own token" in head, head
        cells = page.locator("#tdm-counters .tdm-tree-cell")
        branches = page.locator("#tdm-counters .tdm-tree-branch")
        kept = page.locator("#tdm-counters .tdm-tree-kept")
        assert cells.count() >= 3 and branches.count() >= 1
        assert kept.count() == 0 or page.locator("#tdm-counters .tdm-tree-kept").first.inner_text().startswith("✓")
        rows = page.evaluate("""() => Array.from(document.querySelectorAll('#tdm-counters .tdm-tree-branch'))
            .map(e => getComputedStyle(e).gridRowStart)""")
        assert all(r != "1" for r in rows), rows  # branches hang below the chain's row
        page.locator("#tdm-counters .tdm-tree").scroll_into_view_if_needed()
        shot(page, "chat-tree-1440x900", full_page=False)
        assert low_contrast(page, "#tdm-counters .tdm-tree") == []
        dark = open_page(browser, "?__theme=dark", 1440, 900)
        try:
            setting(dark, "k", "4", "K 4")
            proposer(dark, "tree (the draft model, with branches)", "the drafter's tree")
            clear(dark)
            set_slider(dark, "tdm-chat-max-tokens", 64)
            send(dark, "Write a short poem about the sea and the wind.")
            wait_replies(dark, 1)
            dark.wait_for_selector("#tdm-counters .tdm-tree", timeout=60_000)
            dark.locator("#tdm-counters .tdm-tree").scroll_into_view_if_needed()
            shot(dark, "chat-tree-dark-1440x900", full_page=False)
            assert low_contrast(dark, "#tdm-counters .tdm-tree") == []
        finally:
            dark.close()
    finally:
        setting(page, "k", "auto", "K auto")
        proposer(page, *AUTO)
