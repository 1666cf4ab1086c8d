"""Issue items 3, 5 and 9 in headless Chromium: every figure on screen belongs to the pair on screen, with its
age; one definition of acceptance per label and the draft's cost c on the panel; Compare's seconds saved and
speedup agree when sampled outputs differ in length; the Benchmark tab opens on the latest sweep with Run A and
Run B set to real runs; a quick sweep's time is an estimate from this machine, a running sweep shows elapsed and
remaining time, and the result shows each setting's repeat range and whether the lead is within noise. Each
state is saved as a screenshot in ``test-artifacts/``."""

from __future__ import annotations

import re

import pytest

from test_browser import browser, choose, clear, open_page, open_tab, send, set_slider, setting, shot  # noqa: F401
from test_browser_a11y import AA, CONTRAST_JS

pytestmark = pytest.mark.browser

SMOL = ("SmolLM2-135M-Instruct.F32.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = ("gemma-3-270m.F32.gguf", "gemma-3-270m-q4_k_m.gguf")


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
    page.wait_for_function("t => document.querySelector('#tdm-header').innerText.includes(t)", arg=header_name(target),
                           timeout=300_000)  # the header names the new target once it is loaded
    page.wait_for_selector("#tdm-pair-status .tdm-status-ok")


def header_name(file: str) -> str:
    """'SmolLM2-135M-Instruct F32' for 'SmolLM2-135M-Instruct.F32.gguf', as the header names a target."""
    stem, dot, quant = file.removesuffix(".gguf").rpartition(".")
    return f"target {stem} {quant}" if dot and stem else f"target {file.removesuffix('.gguf')}"


def measure_plain(page) -> float:
    """Measure plain speed with no reply on screen: the pair's plain speed, stored; the figure the note gives."""
    clear(page)
    page.click("#tdm-measure")
    page.wait_for_selector("#tdm-measure-note .tdm-status-ok", timeout=180_000)
    return float(re.search(r"([\d.]+) tok/s", page.inner_text("#tdm-measure-note")).group(1))


NEW_TEXTS = ("acceptance (accepted", "c (draft", "Why this speed", "Accepted at position", "A draft is judged")


def new_texts_contrast(page) -> list:
    """The panel's new texts below 4.5:1 (each text's own colour over what is behind it, as the a11y test walks)."""
    texts = page.evaluate(CONTRAST_JS, None)
    mine = [t for t in texts if t["text"].startswith(NEW_TEXTS)]
    assert len(mine) >= 4, mine
    return [t for t in mine if t["ratio"] < AA]


def test_the_panel_defines_each_acceptance_and_shows_the_drafts_cost(page):
    measure_plain(page)
    setting(page, "k", "4", "K 4")  # a fixed K: every pass drafts, whatever the machine's load
    set_slider(page, "tdm-chat-max-tokens", 48)
    send(page, "Name three fruits and say one thing about each.")
    page.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=180_000)
    text = page.inner_text("#tdm-counters")
    assert "acceptance (accepted ÷ drafted)" in text, text
    assert "Accepted at position i, given 1…i−1 were" in text, text  # the bars' own definition, told apart
    c = re.search(r"([\d.]+)\s*c \(draft ÷ target step\)", text)
    assert c and 0 < float(c.group(1)) < 10, text  # c is measured, not a dash
    why = re.search(r"K·c \+ v = ([\d.]+)·([\d.]+) \+ ([\d.]+) = ([\d.]+) target steps", text)
    assert why and float(why.group(2)) == pytest.approx(float(c.group(1)), abs=0.006), text
    assert "cheap draft" in text, text
    page.locator("#tdm-counters").scroll_into_view_if_needed()
    assert not new_texts_contrast(page)
    shot(page, "figures-panel-c-and-acceptance", full_page=False)
    dark = open_page(page.context.browser, "?__theme=dark", 1440, 900)
    try:  # a fresh page shows no reply: the panel's legend, glossary and counters in dark mode
        setting(dark, "k", "4", "K 4")
        set_slider(dark, "tdm-chat-max-tokens", 32)
        send(dark, "Name two colours.")
        dark.wait_for_selector("#tdm-chat-status .tdm-status-ok", timeout=180_000)
        assert "c (draft ÷ target step)" in dark.inner_text("#tdm-counters")
        dark.locator("#tdm-counters").scroll_into_view_if_needed()
        assert not new_texts_contrast(dark)
        shot(dark, "figures-panel-c-and-acceptance-dark", full_page=False)
    finally:
        setting(dark, "k", "auto", "K auto")
        dark.close()
    setting(page, "k", "auto", "K auto")


def test_compare_at_a_temperature_says_seconds_saved_per_the_same_tokens_as_its_speedup(page):
    setting(page, "temperature", "0.7", "T = 0.7", back="Compare")
    try:
        set_slider(page, "tdm-compare-max-tokens", 64, accordion="tdm-compare-sampling")
        page.fill("#tdm-compare-prompt textarea", "Name a colour.")  # short sampled replies: lengths differ
        page.click("#tdm-compare-run")
        page.wait_for_selector("#tdm-compare-arena .tdm-race-wrap", timeout=240_000)
        assert page.locator("#tdm-compare-arena .tdm-saving").count() == 1, page.inner_text("#tdm-compare-arena")
        note = page.inner_text("#tdm-compare-arena .tdm-saving")
        row = page.inner_text("#tdm-compare-result")
        speed = re.search(r"([\d.]+)×\s*speedup, measured", row)
        said = re.search(r"at ([\d.]+)× the plain rate: (\d+) tokens in ([\d.]+) s instead of ([\d.]+) s, "
                         r"([\d.]+) s (saved|lost)", note)
        assert speed and said, (row, note)
        assert said.group(1) == speed.group(1), (row, note)  # one speedup, not two
        spec_s, plain_s = float(said.group(3)), float(said.group(4))
        assert plain_s / spec_s == pytest.approx(float(speed.group(1)), rel=0.08), note  # the seconds agree with it
        lengths = [int(x) for x in re.findall(r"(\d+) tokens", page.inner_text("#tdm-compare-arena .tdm-lane-head"))]
        if len(set(lengths)) > 1:  # sampled outputs of different lengths: both named
            assert "differ in length" in note and all(str(n) in note for n in lengths), (lengths, note)
        first = page.locator("#tdm-compare-arena .tdm-lane[data-first=true] .tdm-finish")
        page.wait_for_function("el => getComputedStyle(el).visibility === 'visible'", arg=first.element_handle())
        page.wait_for_timeout(1500)  # the replay has ended: both texts are on screen
        shot(page, "figures-compare-t07-saving", full_page=False)
    finally:
        setting(page, "temperature", "0", "T = 0 (greedy)", back="Chat")


def test_after_switching_pair_no_figure_of_the_previous_pair_is_shown(page):
    tps = measure_plain(page)
    before = page.inner_text("#tdm-counters")
    assert f"{tps:.1f} tok/s" in before, before
    try:
        load_pair(page, *GEMMA)
        open_tab(page, "Chat")
        page.wait_for_function("() => document.querySelector('#tdm-counters').innerText.includes('demo-gemma3')",
                               timeout=15_000)
        after = page.inner_text("#tdm-counters")
        assert f"{tps:.1f} tok/s" not in after, after  # the previous pair's plain speed is gone
        assert "not measured for this pair here yet" in after and "Measure plain speed" in after, after
        shot(page, "figures-pair-switched-panel", full_page=False)
        open_tab(page, "Benchmark")
        shown = page.inner_text("#tdm-bench-recommendation")
        assert "demo-smollm2" not in shown and "Latest sweep of this pair" not in shown, shown
        new = measure_plain(page)  # the button measures this pair, not the previous reply's
        page.wait_for_function(f"() => document.querySelector('#tdm-counters').innerText.includes('{new:.1f} tok/s')")
    finally:
        load_pair(page, *SMOL)
        open_tab(page, "Chat")


def test_a_quick_sweep_estimates_its_time_shows_elapsed_and_left_and_each_settings_repeat_range(page):
    open_tab(page, "Benchmark")
    quick = page.get_by_text(re.compile(r"^Quick")).first.inner_text()
    assert "~30 s" not in quick and "demo pair" not in quick, quick  # no figure from another machine
    eta = page.inner_text("#tdm-quick-eta")
    assert "Quick sweep of this pair here:" in eta and ("estimate" in eta or "not estimated yet" in eta), eta
    if not page.locator("#tdm-runs .virtual-row .body-cell").count():  # no run stored yet: hints, never 0
        for field in ("#tdm-run-a", "#tdm-run-b"):
            box = page.locator(f"{field} input, {field} textarea").first
            assert box.input_value() == "" and "run id" in box.get_attribute("placeholder"), field
    page.get_by_label("Drafts").fill("SmolLM2-135M-Instruct.Q4_1,lookup")
    page.get_by_label("K values").fill("2,4")
    page.get_by_label("Tokens per run").fill("16")
    page.get_by_role("button", name="Run sweep").click()
    page.wait_for_function("() => /\\d+ s elapsed, ≈ \\d+ s left/.test(document.querySelector('#tdm-bench-status')"
                           ".innerText)", timeout=120_000)
    shot(page, "figures-sweep-elapsed-left", full_page=False)
    page.wait_for_selector("#tdm-bench-status :text('Run #')", timeout=600_000)
    rec = page.inner_text("#tdm-bench-recommendation")
    assert re.search(r"repeats [\d.]+–[\d.]+x", rec), rec
    assert "within noise" in rec or "beyond the repeat range" in rec, rec
    heads = page.eval_on_selector_all("#tdm-cells th", "ths => ths.map(th => th.innerText.trim())")
    col = heads.index("repeats")
    rows = page.eval_on_selector_all("#tdm-cells .virtual-row", "rows => rows.map(r => Array.from("
                                     "r.querySelectorAll('.body-cell')).map(c => c.innerText.trim()))")
    assert rows and all(re.fullmatch(r"[\d.]+–[\d.]+", r[col]) for r in rows), rows
    page.locator("#tdm-bench-recommendation").scroll_into_view_if_needed()
    shot(page, "figures-sweep-repeat-range", full_page=False)


def test_the_benchmark_opens_on_the_latest_sweep_with_run_a_and_b_the_latest_two(browser):  # noqa: F811
    from gradio_client import Client

    from support.ui_server import app_url

    second = Client(app_url(), verbose=False).predict("lookup", "2", "all", 8, 0.0, True, api_name="/tune")
    pg = open_page(browser, width=1440, height=900)  # a fresh page, as the user's on opening the app
    try:
        open_tab(pg, "Benchmark")
        pg.wait_for_selector("#tdm-runs .virtual-row .body-cell")
        shown = pg.inner_text("#tdm-bench-recommendation")
        assert "No result yet" not in shown, shown
        assert re.search(rf"Latest sweep of this pair: run #{second['run_id']}, \d{{4}}-\d\d-\d\d \d\d:\d\d", shown), \
            shown
        ids = [pg.locator(f"#{f} input, #{f} textarea").first.input_value() for f in ("tdm-run-a", "tdm-run-b")]
        table = pg.eval_on_selector_all("#tdm-runs .virtual-row", "rows => rows.map(r => "
                                        "r.querySelector('.body-cell').innerText.trim())")
        assert ids == table[:2] and ids[0] == str(second["run_id"]), (ids, table)
        assert "0" not in ids
        pg.locator("#tdm-bench-recommendation").scroll_into_view_if_needed()
        shot(pg, "figures-bench-opens-on-latest", full_page=False)
        pg.locator("#tdm-history").scroll_into_view_if_needed()
        shot(pg, "figures-bench-run-a-b-defaults", full_page=False)
        pg.get_by_role("button", name="Compare A and B").click()
        pg.wait_for_function("() => document.body.innerText.includes('Run B: #')")
    finally:
        pg.close()
