"""Issue 22 in headless Chromium, the Benchmark, Models and Pair settings parts: the sweep's progress bar is
visible and the recommendation says a sweep is running as soon as it starts; an Import error shows next to the
button and a .gguf in the home folder imports by path; the Models tab is filled on open with the installed demo pair checked
compatible and no Hub model preselected; the plots are readable with their legends outside the axes; the
History is filled on open; headers do not break mid-word. Each state is saved in ``test-artifacts/``."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from support.tiny_gguf import write_tiny
from support.ui_server import ARTIFACTS
from test_browser import browser, open_page, open_tab, shot  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser

# Each header's text: the number of lines its words are laid out on (1 unless a word or the header wraps).
ONE_LINE_HEADERS_JS = """sel => Array.from(document.querySelectorAll(sel + ' th')).filter(th => th.innerText.trim())
    .map(th => { const walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT), tops = new Set();
                 for (let n = walk.nextNode(); n; n = walk.nextNode()) {
                     if (!n.textContent.trim() || !n.parentElement.offsetParent) continue;
                     const r = document.createRange(); r.selectNodeContents(n);
                     for (const x of r.getClientRects()) if (x.width > 0) tops.add(Math.round(x.top));
                 }
                 return [th.innerText.trim(), tops.size]; })"""


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 - the shared browser fixture
    pg = open_page(browser, width=1440, height=900)
    yield pg
    pg.close()


@pytest.fixture
def downloads():
    """A folder in the home folder, as ~/Downloads would be (outside Tandem's data folder)."""
    folder = Path.home() / ".cache" / "tandem" / f"ui-import-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def table_rows(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"{selector} .virtual-row", "rows => rows.map(r => Array.from("
                                     "r.querySelectorAll('.body-cell')).map(c => c.innerText.trim()))")


def headers_on_one_line(page, selector: str) -> None:
    heads = page.evaluate(ONE_LINE_HEADERS_JS, selector)
    assert heads and all(lines == 1 for _, lines in heads), heads


def test_the_models_tab_is_filled_on_open_with_the_demo_pair_compatible(page):
    open_tab(page, "Models")
    page.wait_for_selector("#tdm-pairs .virtual-row .body-cell")  # filled without pressing Estimate
    rows = table_rows(page, "#tdm-pairs")
    heads = page.eval_on_selector_all("#tdm-pairs th", "ths => ths.map(th => th.innerText.trim())")
    col = heads.index("compatible")
    demo = next(r for r in rows if r[0] == "demo-smollm2")
    assert demo[col] == "yes" and demo[heads.index("installed")] == "yes", (heads, demo)
    assert "not checked" not in {r[col] for r in rows if r[heads.index("installed")] == "yes"}, rows
    assert page.input_value("#tdm-pull-choice input") == ""  # no Hub model preselected
    page.click("#tdm-pull-choice input")
    options = page.locator("ul[role=listbox] li").all_inner_texts()
    assert options and all("GiB" in o or "size unknown" in o for o in options), options
    page.keyboard.press("Escape")
    headers_on_one_line(page, "#tdm-installed")
    headers_on_one_line(page, "#tdm-pairs")
    shot(page, "models-on-open")


def test_an_import_error_shows_next_to_the_button(page, downloads):
    open_tab(page, "Models")
    bad = downloads / "not-a-model.gguf"
    bad.write_bytes(b"this is not a GGUF file" * 100)
    page.fill("#tdm-import-path textarea, #tdm-import-path input", str(bad))
    page.click("#tdm-import")
    status = page.locator("#tdm-import-status textarea")
    page.wait_for_function("el => el.value.startsWith('error:')", arg=status.element_handle())
    assert "not-a-model.gguf" in status.input_value(), status.input_value()
    # in view whatever the length of the installed list above it (the app scrolls it up where needed)
    page.wait_for_function("() => { const r = document.querySelector('#tdm-import-status').getBoundingClientRect();"
                           " return r.top >= 0 && r.bottom <= window.innerHeight; }")
    button, note = box(page, "#tdm-import"), box(page, "#tdm-import-status")
    assert 0 <= note["y"] - (button["y"] + button["height"]) < 200, (button, note)  # right under the button
    shot(page, "models-import-error", full_page=False)

    (downloads / "folder.gguf").mkdir()
    for path, words in ((downloads / "folder.gguf", "is a folder"), (downloads / "missing.gguf", "no such file")):
        page.fill("#tdm-import-path textarea, #tdm-import-path input", str(path))
        page.click("#tdm-import")
        page.wait_for_function(f"el => el.value.includes({words!r})", arg=status.element_handle())


def test_a_gguf_in_the_home_folder_imports_by_path_without_a_copy(page, downloads):
    from gradio_client import Client

    from support.ui_server import app_url

    open_tab(page, "Models")
    good = write_tiny(downloads / f"tiny-{downloads.name}.gguf")
    page.fill("#tdm-import-path textarea, #tdm-import-path input", str(good))
    page.click("#tdm-import")
    status = page.locator("#tdm-import-status textarea")
    page.wait_for_function("el => el.value.startsWith('imported')", arg=status.element_handle())
    text = status.input_value()
    assert str(good) in text and "not copied" in text, text
    page.wait_for_function(f"document.querySelector('#tdm-installed').innerText.includes({good.stem!r})")
    shot(page, "models-import-by-path", full_page=False)
    model_id = text.split()[1].rstrip(":")
    assert "forgot" in Client(app_url(), verbose=False).predict(model_id, api_name="/models_delete")[0]
    assert good.is_file()  # forgotten, not deleted


def test_the_sweep_shows_a_visible_progress_bar_and_readable_plots(page):
    open_tab(page, "Benchmark")
    page.get_by_label("Drafts").fill("SmolLM2-135M-Instruct.Q4_1")
    page.get_by_label("K values").fill("2,4")
    page.get_by_label("Tokens per run").fill("16")
    page.get_by_role("button", name="Run sweep").click()
    page.wait_for_function("document.querySelector('#tdm-bench-recommendation').innerText.includes('A sweep is "
                           "running')", timeout=5000)  # what was there is replaced at once, not when the sweep ends
    bar = page.locator("#tdm-bench-status .progress-bar, #tdm-bench-status .eta-bar, "
                       "#tdm-bench-status .progress-text").first
    bar.wait_for(state="visible")
    shape = bar.bounding_box()
    assert shape and shape["height"] > 0 and shape["width"] > 0, shape
    status = box(page, "#tdm-bench-status")
    assert status["height"] >= 40, status  # the bar has room: it is not drawn into a 0 px container
    shot(page, "bench-sweep-progress", full_page=False)
    page.wait_for_selector("#tdm-bench-status :text('Run #')", timeout=300_000)
    page.wait_for_selector("#tdm-plot-k img")
    for plot in ("#tdm-plot-k", "#tdm-plot-pos", "#tdm-plot-mp"):
        sizes = page.eval_on_selector(f"{plot} img", "i => [i.naturalWidth, i.getBoundingClientRect().width]")
        natural, shown = sizes
        # legend text is 9 pt at 110 dpi (13.75 px) in the file: shown at >= 0.65 of it, >= 9 px on screen
        assert shown >= 0.65 * natural, (plot, sizes)
        assert not page.locator(f"{plot} [data-testid=block-label]").is_visible()  # no chip over the title
    headers_on_one_line(page, "#tdm-cells")
    glossary = page.inner_text("#tdm-lab-glossary")
    for term in ("α (alpha)", "c", "v", "bound", "Cost of one draft token"):
        assert term in glossary, glossary
    page.locator("#tdm-plot-k").scroll_into_view_if_needed()
    shot(page, "bench-plots", full_page=False)


def test_history_is_filled_on_open(browser):  # noqa: F811 - the shared browser fixture
    pg = open_page(browser, width=1440, height=900)  # a fresh page: no Refresh pressed
    try:
        open_tab(pg, "Benchmark")
        pg.wait_for_selector("#tdm-runs .virtual-row .body-cell")
        rows = table_rows(pg, "#tdm-runs")
        assert rows and any("quick" in r for r in rows), rows
        headers_on_one_line(pg, "#tdm-runs")
        pg.locator("#tdm-history").scroll_into_view_if_needed()
        shot(pg, "bench-history-on-open", full_page=False)
    finally:
        pg.close()


def test_the_pair_shows_one_parameter_count_and_its_file_type(page):
    open_tab(page, "Pair settings")
    page.wait_for_selector("#tdm-pairinfo table")
    info = page.inner_text("#tdm-pairinfo")
    assert "256M" not in info and "135M params" in info, info  # llama.cpp's size class guessed from 30 layers
    assert "file type F32" in info and "file type Q4_1" in info, info
    page.locator("#tdm-pairinfo").screenshot(path=str(ARTIFACTS / "pair-info.png"))
    open_tab(page, "Chat")


def test_plot_legends_sit_outside_the_axes(tmp_path, monkeypatch):
    from app.lab import plots

    figures = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (figures.append(fig), save(fig, path))[1])
    cells = [{"draft": d, "k": k, "speedup": s, "speedup_min": s - .1, "speedup_max": s + .1, "bound": s + .2,
              "per_position": [.9, .7, .5, .4][:k]}
             for d, base in (("SmolLM2-135M-Instruct.Q4_1", 1.3), ("lookup", 1.1)) for k, s in ((2, base), (4, base))]
    plots.write_all(cells, tmp_path)
    assert len(figures) == 3
    for fig in figures:
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend()
        assert legend is not None
        inner, outer = ax.get_window_extent(renderer), legend.get_window_extent(renderer)
        assert outer.y1 <= inner.y0, (inner, outer)  # below the axes, not over the data
        assert min(t.get_fontsize() for t in legend.get_texts()) >= 9


def test_a_progress_bar_in_the_chat_panel_does_not_cover_the_glossary(page):
    """Make it faster (a quick sweep) draws a progress bar in the note under its button: the note makes room
    for it instead of drawing it over "What these numbers mean"."""
    open_tab(page, "Chat")
    page.click("#tdm-faster")  # first the plan (what it will do, about how long), then Start
    page.click("#tdm-faster-start")
    bar = page.locator("#tdm-measure-note .progress-bar, #tdm-measure-note .eta-bar, "
                       "#tdm-measure-note .progress-text").first
    bar.wait_for(state="visible")
    page.wait_for_timeout(300)  # the bar's first frames
    note, glossary, shape = box(page, "#tdm-measure-note"), box(page, "#tdm-glossary"), bar.bounding_box()
    assert note["height"] >= 40 and note["y"] + note["height"] <= glossary["y"] + 1, (note, glossary)
    assert shape["y"] + shape["height"] <= glossary["y"] + 1, (shape, glossary)
    shot(page, "chat-panel-progress", full_page=False)
    page.wait_for_selector("#tdm-measure-note .tdm-status-ok, #tdm-measure-note .tdm-status-error",
                           timeout=300_000)
