"""Issue 50 item 8 in headless Chromium: every visible text (fields' values and placeholders too) reaches WCAG AA contrast (4.5:1) in light and dark
mode, a reply's tokens are reachable by keyboard (one tab stop per reply, the arrow keys move along it), and on a
phone every tab shows (none folded behind "⋯") and the model names are not cut. Screenshots in
``test-artifacts/``: ``a11y-light-1366x800.png``, ``a11y-dark-1366x800.png``, ``a11y-phone-390x844.png``."""

from __future__ import annotations

import pytest

from test_browser import browser, clear, open_page, open_tab, send, set_slider, shot, wait_replies  # noqa: F401

pytestmark = pytest.mark.browser

TABS = ("Chat", "Compare", "Pair settings", "Models", "Benchmark")
AA = 4.5  # WCAG 2.x AA for text; applied to every text here, large or not

# Each visible element with its own (direct) text, or a field with a value or a placeholder (in the placeholder's
# colour): its text colour and the backgrounds up the tree,
# alpha-composited up to the first opaque one (white where there is none), give WCAG's ratio. Each ancestor's
# opacity fades the text too.
# Colours go through a canvas so that any CSS colour syntax the browser computes (rgb, oklch, color()) is read.
CONTRAST_JS = """(root) => {
  const cv = document.createElement('canvas'); cv.width = cv.height = 1;
  const cx = cv.getContext('2d', {willReadFrequently: true});
  const rgba = (s) => {
    if (!s || s === 'transparent' || s === 'none') return [0, 0, 0, 0];
    cx.clearRect(0, 0, 1, 1); cx.fillStyle = '#000'; cx.fillStyle = s; cx.fillRect(0, 0, 1, 1);
    const d = cx.getImageData(0, 0, 1, 1).data;
    return [d[0], d[1], d[2], d[3] / 255];  // getImageData gives unpremultiplied values
  };
  const over = (top, under) => {  // top composited over an opaque colour
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]);
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const hex = (c) => '#' + c.slice(0, 3).map(v => Math.round(v).toString(16).padStart(2, '0')).join('');
  const out = [];
  const all = (root || document.body).querySelectorAll('*');
  for (const el of all) {
    if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(el.tagName)) continue;
    // a field's typed text is its value, not a child node; an empty field shows its placeholder, in its colour
    const field = el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement;
    const shown = field && !['checkbox', 'radio', 'range', 'color', 'file', 'hidden'].includes(el.type);
    const holder = shown && !el.value && el.placeholder;
    const text = shown ? (el.value || el.placeholder || '').trim()
      : Array.from(el.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    if (!text) continue;
    const r = el.getBoundingClientRect();
    if (!el.getClientRects().length || r.width < 1 || r.height < 1) continue;
    const st = getComputedStyle(el);
    if (st.visibility !== 'visible') continue;
    let opacity = 1, layers = [], e = el;
    for (; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      opacity *= parseFloat(s.opacity);
      const bg = rgba(s.backgroundColor);
      if (bg[3] > 0) { layers.push(bg); if (bg[3] >= 1) break; }
    }
    if (opacity < 0.05) continue;  // faded out (an animation's first frame): not shown
    let bg = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    const fg0 = rgba(el instanceof SVGElement ? st.fill : holder ? getComputedStyle(el, '::placeholder').color
                                                                 : st.color);
    const fg = over([fg0[0], fg0[1], fg0[2], fg0[3] * opacity], bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const cls = (typeof el.className === 'string' ? el.className : '').trim().split(/\\s+/).slice(0, 3).join('.');
    out.push({ratio: Math.round(ratio * 100) / 100, text: (holder ? 'placeholder: ' : '') + text.slice(0, 40),
              fg: hex(fg), bg: hex(bg),
              el: el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (cls ? '.' + cls : '')});
  }
  return out;
}"""


def reply(page, tokens: int = 24) -> None:
    """A finished, coloured reply in the Chat."""
    clear(page)
    set_slider(page, "tdm-chat-max-tokens", tokens)
    send(page, "Name three fruits.")
    wait_replies(page, 1)
    page.wait_for_selector("#tdm-chatbot .tdm-msg-bot .tdm-tok")


def offenders(page) -> list[str]:
    """Texts under 4.5:1 on every main tab, one line per element, colour and background."""
    out: dict[tuple, str] = {}
    for tab in TABS:
        open_tab(page, tab)
        page.wait_for_timeout(400)  # the selected tab's underline and the panel's fade-in
        texts = page.evaluate(CONTRAST_JS, None)
        assert len(texts) > 10, (tab, texts)  # the walk saw the page
        for t in texts:
            if t["ratio"] < AA:
                out.setdefault((t["el"], t["fg"], t["bg"]),
                               f'{tab}: {t["ratio"]}:1 {t["fg"]} on {t["bg"]} {t["el"]} "{t["text"]}"')
    open_tab(page, "Chat")
    return list(out.values())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_visible_text_reaches_aa_contrast(browser, theme):
    pg = open_page(browser, "?__theme=dark" if theme == "dark" else "", 1366, 800)
    try:
        assert pg.evaluate("document.body.classList.contains('dark')") == (theme == "dark")
        clear(pg)
        pg.click("#tdm-measure")  # a plain speed on record: the reply's speedup shows, coloured good or bad
        pg.wait_for_selector("#tdm-measure-note .tdm-status-ok")
        reply(pg)  # the coloured tokens' tints are backgrounds too
        pg.wait_for_selector("#tdm-counters .tdm-good, #tdm-counters .tdm-bad")
        bad = offenders(pg)
        shot(pg, f"a11y-{theme}-1366x800", full_page=False)
        assert not bad, f"{len(bad)} texts under {AA}:1 in {theme} mode:\n" + "\n".join(bad)
    finally:
        pg.close()


def test_a_replys_tokens_are_one_tab_stop_and_the_arrow_keys_walk_them(browser):
    pg = open_page(browser, "", 1366, 800)
    try:
        reply(pg, 32)
        toks = "#tdm-chatbot .tdm-msg-bot .tdm-tok"
        n = pg.locator(toks).count()
        assert n > 3
        assert pg.locator(f"{toks}[tabindex='0']").count() == 1  # one stop, however long the reply
        assert pg.locator(f"{toks}[aria-label]").count() == 1  # no per-token attributes on the others
        pg.get_by_role("tab", name="Chat").focus()
        for _ in range(12):  # from the tab bar, Tab reaches the reply
            pg.keyboard.press("Tab")
            if pg.evaluate("document.activeElement.matches('.tdm-msg-bot .tdm-tok')"):
                break
        focused = pg.evaluate("""() => { const a = document.activeElement, all = Array.from(
            document.querySelectorAll('#tdm-chatbot .tdm-msg-bot .tdm-tok'));
            return [all.indexOf(a), a.getAttribute('role'), a.getAttribute('aria-label')]; }""")
        assert focused[0] == 0, f"Tab never reached the reply's first token: {focused}"
        assert focused[1] == "button"
        assert any(k in focused[2] for k in ("accepted draft", "target-corrected", "bonus", "plain")), focused
        pg.keyboard.press("ArrowRight")
        second = pg.evaluate("""() => { const a = document.activeElement, all = Array.from(
            document.querySelectorAll('#tdm-chatbot .tdm-msg-bot .tdm-tok'));
            return [all.indexOf(a), a.tabIndex, all[0].tabIndex, a.getAttribute('aria-label') || '']; }""")
        assert second[:3] == [1, 0, -1], second  # the stop moved with the focus
        assert ": " in second[3], second
        pg.keyboard.press("End")
        assert pg.evaluate(f"document.activeElement === Array.from(document.querySelectorAll('{toks}')).pop()")
        assert pg.locator(f"{toks}[tabindex='0']").count() == 1
        assert pg.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"  # :focus-visible
        pg.keyboard.press("Enter")  # opens the inspector, as a click does
        pg.wait_for_selector("#tdm-inspector:not([hidden])")
        pg.keyboard.press("Escape")
        pg.wait_for_selector("#tdm-inspector", state="hidden")
        pg.keyboard.press("Home")
        assert pg.evaluate(f"document.activeElement === document.querySelector('{toks}')")
    finally:
        pg.close()


def test_on_a_phone_every_tab_shows_and_model_names_are_not_cut(browser):
    pg = open_page(browser, "", 390, 844)
    try:
        assert not pg.get_by_role("button", name="More tabs").is_visible()
        for name in TABS:
            tab = pg.get_by_role("tab", name=name)
            assert tab.is_visible(), f"the {name} tab is hidden at 390 px"
            box = tab.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (name, box)
            assert tab.evaluate("e => e.tabIndex") >= 0  # reachable by Tab
            tab.click()
            assert tab.get_attribute("aria-selected") == "true"
        pg.get_by_role("tab", name="Pair settings").click()
        cut = pg.evaluate("""() => ['tdm-target', 'tdm-draft'].map(id => {
            const i = document.querySelector('#' + id + ' input');
            return [id, i.value, i.scrollWidth, i.clientWidth]; }).filter(([, v, s, c]) => !v || s > c + 1)""")
        assert not cut, f"model names cut at 390 px: {cut}"
        pg.get_by_role("tab", name="Chat").click()
        shot(pg, "a11y-phone-390x844", full_page=False)
    finally:
        pg.close()
