"""HTML for the live panel (counters, per-position bars, legend, glossary) and the compare results: pure
functions.

Every piece of model (or user) text goes through :func:`esc` before it becomes HTML; nothing else in the UI
builds HTML from model text.
"""

from __future__ import annotations

import functools
import html
from typing import Optional, Sequence

from app.engine.events import KINDS, StepEvent, StopReason, TokenKind
from app.engine.names import AUTO_K, ProposerName
from app.engine.summary import Summary
from app.numfmt import fmt, k_text
from app.service import speedup
from app.service.settings import proposer_words
from app.ui.style import CSS, HEAD  # noqa: F401  (re-exported: the app serves them)

_fmt = functools.partial(fmt, none="–")  # the UI's dash
ACCEPTANCE = "acceptance (accepted ÷ drafted)"  # one definition per label (engine/stats.py)
COST_C = "c (draft ÷ target step)"
BARS_TITLE = "Accepted at position i, given 1…i−1 were"

KIND_LABELS: dict[str, tuple[str, str, str]] = {
    TokenKind.ACCEPTED: ("accepted draft", "drafted by the draft model and verified by the target", "green tint"),
    TokenKind.CORRECTED: ("target-corrected", "the target's own token where it rejected the draft; click it to see "
                                              "what the draft proposed", "red tint, wavy underline"),
    TokenKind.BONUS: ("bonus", "the extra target token after a fully accepted draft",
                      "blue tint, dotted over- and underline"),
    TokenKind.PLAIN: ("plain", "one target step, no speculation", "no tint"),
}

GLOSSARY = [
    ("tokens/s", "Tokens generated per second of decoding; reading the prompt is not counted."),
    (ACCEPTANCE, "Share of drafted tokens the target accepted (accepted ÷ drafted). A draft's tokens after its "
                 "first rejection count as drafted and not accepted: the target never judged them."),
    ("tokens / pass", "Tokens emitted per forward pass of the target; 1.0 without speculation, higher is better."),
    ("K", "Draft length: how many tokens the draft proposes before the target checks them all in one pass; "
          "auto picks K before every pass, mean K is the average over the reply."),
    ("α (alpha)", "Probability that the target accepts a drafted token, counted over the positions it judged."),
    (COST_C, "Cost of one draft token in plain target steps (draft seconds per drafted token ÷ the seconds of "
             "one plain target step): c = 0.4 means a draft token takes 40 % of the time of one target step. A "
             "drafting pass costs K·c + v target steps, so a draft that is right 90 % of the time but costs "
             "c = 0.8 gives about 1×."),
    ("v", "Cost of one verification pass (K + 1 tokens at once) in plain target steps."),
    ("speedup, estimate", "What the model predicts from α, K, c and v: (1 − α^(K+1)) / ((1 − α)(K·c + v))."),
    ("speedup, measured", "This reply's tokens/s divided by a plain run's tokens/s on the same prompt "
                          "(Measure plain speed)."),
    ("bonus", "The extra token the target adds for free when it accepts the whole draft."),
    ("target-corrected", "Where the target rejected the draft: its own token replaces the draft's; click or tap "
                         "it to see what the draft proposed."),
    ("acceptance by draft position", "For each position i of a draft: accepted at position i, given positions "
                                     "1…i−1 were (the target judges a position only when every one before it "
                                     "was accepted). Higher than the overall acceptance, which also counts the "
                                     "positions after a rejection, never judged."),
    ("paused", "Target passes where auto K drafted nothing (K = 0) because drafting would not have paid."),
]


def esc(text: object) -> str:
    """Escape text for HTML content and attribute values (quotes included)."""
    return html.escape(str(text), quote=True)


def legend_html(kinds: Sequence[str] = KINDS) -> str:
    """Each kind as a sample styled like the tokens, its name and its non-colour cue."""
    items = "".join(
        f'<span class="tdm-legend-item" title="{esc(KIND_LABELS[k][1])}">'
        f'<span class="tdm-swatch tdm-tok tdm-{k}">Ab</span>{esc(KIND_LABELS[k][0])}'
        f'<span class="tdm-muted">({esc(KIND_LABELS[k][2])})</span></span>'
        for k in kinds
    )
    if "accepted" in kinds:  # which drafter: lookup's accepted tokens are underlined, dashed
        items += ('<span class="tdm-legend-item" title="A draft token prompt lookup proposed (copied from the '
                  'context or an earlier request) and the target accepted.">'
                  '<span class="tdm-swatch tdm-tok tdm-accepted tdm-lookup">Ab</span>accepted, from lookup'
                  '<span class="tdm-muted">(dashed underline)</span></span>')
    return f'<div class="tdm-legend">{items}</div>'


def glossary_html() -> str:
    rows = "".join(f"<dt>{esc(term)}</dt><dd>{esc(text)}</dd>" for term, text in GLOSSARY)
    return f'<dl class="tdm-glossary">{rows}</dl>'


def bars_html(per_position: Sequence[float], max_bars: int = 16) -> str:
    """Acceptance at each draft position (counted from 1), with a 0–100 % axis."""
    values = list(per_position)[:max_bars]
    if not values:
        return '<div class="tdm-muted">Acceptance by draft position appears after the first drafts.</div>'
    bars = "".join(
        f'<div class="tdm-bar" title="draft position {i}: {v:.0%} accepted of the drafts whose positions 1…{i - 1} '
        f'were accepted">'
        f'<div class="tdm-bar-fill" style="height:{min(max(v, 0.0), 1.0) * 100:.0f}%"></div></div>'
        for i, v in enumerate(values, start=1)
    )
    ticks = "".join(f"<span>{i}</span>" for i in range(1, len(values) + 1))
    return (f'<div class="tdm-chart" role="img" aria-label="acceptance by draft position">'
            f'<div class="tdm-chart-title">{BARS_TITLE}</div>'
            f'<div class="tdm-chart-title">A draft is judged only up to its first rejection, so these read higher '
            f'than the acceptance, which counts every drafted token.</div>'
            f'<div class="tdm-yaxis"><span>100%</span><span>50%</span><span>0%</span></div>'
            f'<div class="tdm-bars">{bars}</div><div class="tdm-xaxis">{ticks}</div>'
            f'<div class="tdm-xlabel">draft position</div></div>')


def _stat(label: str, value: str, hint: str = "", cls: str = "") -> str:
    return (f'<div class="tdm-stat {cls}" title="{esc(hint)}"><div class="tdm-stat-value">{esc(value)}</div>'
            f'<div class="tdm-stat-label">{esc(label)}</div></div>')


def _claim_stat(claim: dict, copied: int = 0) -> str:
    """The speedup; ``copied``: tokens lookup copied from earlier requests, said in its label (what they saved is
    a repeat of earlier work, not this reply's)."""
    s = claim["speedup"]
    measured = claim["kind"] == "measured"
    label = "speedup, measured" if measured else "speedup, estimate"
    return _stat(f"{label} · {copied} copied" if copied else label, f"{s:.2f}×" if measured else f"≈{s:.2f}×",
                 claim["source"] + (f"; {copied} tokens were copied from earlier replies" if copied else ""),
                 "tdm-good" if s >= 1 else "tdm-bad")


def copied_line(summary: Summary) -> Optional[str]:
    """How many of a reply's tokens prompt lookup copied from earlier requests' text (lookup memory "pair"), or
    None when it copied none."""
    n = summary.lookup_earlier
    if not n:
        return None
    return (f"{n} of this reply's {summary.tokens} tokens were copied by prompt lookup from an earlier reply "
            f"(lookup remembers every reply since the pair was loaded): the speedup includes that repeat of earlier "
            f"work. New chat turns this off.")


def claim_note(claim: Optional[dict]) -> str:
    """One sentence saying where the shown speedup comes from."""
    if claim is None:
        return ("No speedup yet: it needs the speed of plain decoding, not measured for this pair here. "
                "Press Measure plain speed (a few seconds) to time a plain run of this prompt.")
    if claim["kind"] == "measured":
        return f"Speedup measured against {claim['source']}."
    return (f"Speedup estimated by the model from this reply: α = {_fmt(claim.get('alpha'))}, "
            f"mean K = {_fmt(claim.get('k'), '.1f')}, c = {_fmt(claim.get('c'))}, v = {_fmt(claim.get('v'))}, "
            f"with c and v against {claim['source']}. Measure plain speed for a measured figure.")


def counters_html(summary: Summary, speculative: bool, claim: Optional[dict] = None, notes: Sequence[str] = ()) -> str:
    """The latest reply's counters. A speedup appears only for a speculative reply, measured or labelled as
    the model's estimate (``speedup.choose``); ``notes`` are extra lines (e.g. the last Compare)."""
    tps = summary.tokens_per_s
    items = [_stat("tokens/s", f"{tps:.1f}", "generated tokens over decode time (prompt processing excluded)")]
    lines: list[str] = []
    if speculative:
        items += [
            _stat(ACCEPTANCE, _fmt(summary.acceptance_rate, ".0%") if summary.drafted else "–",
                  "accepted draft tokens ÷ drafted tokens (tokens after a rejection count as not accepted)"),
            _stat("tokens / pass", _fmt(summary.mean_accepted, ".2f"),
                  "tokens emitted per target forward pass (1.0 without speculation)"),
            _stat("mean K", _fmt(summary.mean_k, ".1f"), "drafted tokens per target pass that drafted"),
        ]
        cost = speedup.draft_costs(summary, claim, {"tps": summary.baseline_tps} if summary.baseline_tps else None)
        if summary.drafted:
            items.append(_stat(COST_C, _fmt(cost["c"] if cost else None, ".2f"),
                               "draft seconds per drafted token ÷ seconds of one plain target step"))
        if summary.tokens:
            if claim:
                items.append(_claim_stat(claim, summary.lookup_earlier))
            lines.append(claim_note(claim))
            copied = copied_line(summary)
            if copied:
                lines.append(copied)
        if summary.drafted:
            lines.append(cost_line(cost))
        pause = pause_line(summary)
        if pause:
            lines.append(pause)
    else:
        lines.append("Speculation is off: plain decoding with the target alone, so there is no speedup to show.")
    lines += list(notes)
    out = f'<div class="tdm-stats">{"".join(items)}</div>'
    out += "".join(f'<div class="tdm-note">{esc(line)}</div>' for line in lines)
    if speculative:
        out += bars_html(summary.per_position)
    return out


def tree_html(step: Optional[StepEvent]) -> str:
    """The tree the latest tree step verified (proposer tree): the draft's chain on the first row, each branch
    under the chain token it stood beside, the path the target kept marked (colour and a check mark, and said in
    words); nothing without one."""
    if step is None or not step.branches:
        return ""
    nodes = step.branches
    depth = [0] * len(nodes)
    for v, node in enumerate(nodes):
        depth[v] = depth[node.parent] + 1 if node.parent >= 0 else 1
    lanes: dict[int, int] = {}  # a branch's row: under the chain, one row per branch at the same depth
    row = [0 if not n.branch else lanes.setdefault(depth[v], 0) + 1 for v, n in enumerate(nodes)]
    for v, n in enumerate(nodes):
        if n.branch:
            lanes[depth[v]] = row[v]
    cells = ['<div class="tdm-tree-cell tdm-tree-root" style="grid-row:1;grid-column:1" '
             'title="the pending token the tree hangs below">▸</div>']
    for v, n in enumerate(nodes):
        cls = "tdm-tree-kept" if n.kept else "tdm-tree-cut"
        cls += " tdm-tree-branch" if n.branch else ""
        mark = "✓ " if n.kept else ""
        what = ("kept" if n.kept else "not kept") + (", a branch" if n.branch else ", the chain")
        cells.append(f'<div class="tdm-tree-cell {cls}" style="grid-row:{row[v] + 1};grid-column:{depth[v] + 1}" '
                     f'title="{what}">{"└ " if n.branch else ""}{mark}<code>{esc(visible(n.text))}</code></div>')
    kept = sum(n.kept for n in nodes)
    words = (f"the target kept {kept} of them through a branch" if step.branch_hit else
             f"the target kept {kept} of them along the chain" if kept else "the target kept none of them")
    head = (f"Tree of pass {step.step + 1}: {len(nodes) - step.tree} chain tokens and {step.tree} "
            f"branch{'es' * (step.tree != 1)}; {words}, then added its own token.")
    return (f'<div class="tdm-tree" role="figure" aria-label="{esc(head)}"><div class="tdm-chart-title">'
            f'{esc(head)}</div><div class="tdm-tree-grid">{"".join(cells)}</div></div>')


def visible(text: str) -> str:
    """Token text with its whitespace made visible (for the inspector and the tree)."""
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def pair_counters_html(pair: str, baseline: Optional[dict], now: Optional[float] = None) -> str:
    """The panel right after another pair was loaded: nothing of the previous pair's, and this pair's plain speed
    with its age, or that it is not measured for this pair yet (and how to measure it)."""
    if baseline and baseline.get("tps"):
        when = speedup.age(speedup.stamp_age(baseline.get("measured_at"), now))
        plain = (f"Plain speed of {pair} here: {float(baseline['tps']):.1f} tok/s, measured {when} "
                 f"({baseline.get('measured_at')}, {baseline.get('tokens', '?')} tokens).")
    else:
        plain = (f"Plain speed of {pair}: not measured for this pair here yet. Press Measure plain speed (a few "
                 "seconds); until then a reply's speedup is the model's estimate, labelled as one.")
    return (f'<div class="tdm-note tdm-pair-switched">Loaded {esc(pair)}: the previous pair\'s figures are '
            f'cleared; the next reply shows its own.</div>'
            f'<div class="tdm-note">{esc(plain)}</div>')


def cost_line(cost: Optional[dict]) -> str:
    """Why a high acceptance can still give about 1×: what a drafting pass costs against what it yields."""
    if cost is None:
        return ("c (the draft's cost) needs one plain target step timed for this pair: press Measure plain speed. "
                "A drafting pass costs K·c + v target steps, so a right but slow draft gains nothing.")
    k, c, v = cost["k"], cost["c"], cost["v"]
    per_step = _fmt(cost["predicted"], ".2f")
    return (f"Why this speed: a drafting pass costs K·c + v = {k:.1f}·{c:.2f} + {v:.2f} = {cost['pass_cost']:.1f} "
            f"target steps and yields ≈{cost['tokens']:.1f} tokens: {per_step} tokens per target step's time, "
            f"against 1 for plain decoding. A high acceptance pays only with a cheap draft (small c). Target step "
            f"from {cost['source']}.")


def pause_line(summary: Summary) -> Optional[str]:
    """When and why the draft was paused (Chat and Compare say the same), or that nothing was drafted; None
    when every target pass drafted."""
    paused, steps = summary.paused_steps, summary.steps
    why = f": {summary.limit}" if summary.limit else ""
    if steps and not summary.drafted:
        if paused >= steps:
            return (f"Nothing was drafted: auto K paused speculation (K = 0) on all {steps} target passes{why}. "
                    f"Every token came from a plain target step.")
        return "Nothing was drafted: the proposer found nothing to propose. Every token came from a plain target step."
    if paused:
        return f"Speculation paused (K = 0) for {paused} of {steps} target passes{why}"
    return None


def k_label(k: object, mean_k: Optional[float] = None) -> str:
    return f"K {k_text(k, mean_k=mean_k)}"


def reply_line(summary: Summary, speculative: bool, proposer: str = ProposerName.DRAFT, k: object = AUTO_K,
               saved: Optional[float] = None, saved_kind: Optional[str] = None) -> str:
    """'draft (K 4): 128 of 133 accepted · 41 target passes for 150 tokens · 52.3 tok/s · ≈ 2.3 s saved
    (estimate)'. Seconds saved only when measured or estimated (``saved_kind``)."""
    n, tps = summary.tokens, summary.tokens_per_s
    if not speculative:
        return f"plain decoding: {n} tokens in {summary.t_total:.1f} s · {tps:.1f} tok/s"
    who = proposer_words(proposer, short=True)
    earlier = f", {summary.lookup_earlier} of them copied from an earlier reply" if summary.lookup_earlier else ""
    mixed = f" ({summary.lookup_accepted} from lookup{earlier})" \
        if proposer == ProposerName.AUTO and summary.lookup_drafted else ""
    parts = [f"{who} ({k_label(k, summary.mean_k)}): {summary.accepted} of {summary.drafted} accepted{mixed}",
             f"{summary.steps} target passes for {n} tokens", f"{tps:.1f} tok/s"]
    if saved is not None and saved_kind:
        word = "saved" if saved >= 0 else "lost"
        approx = "≈ " if saved_kind == "estimate" else ""
        parts.append(f"{approx}{abs(saved):.1f} s {word} ({saved_kind})")
    return " · ".join(parts)


def status_html(message: str, kind: str = "info") -> str:
    return f'<div class="tdm-status tdm-status-{esc(kind)}">{esc(message)}</div>' if message else ""


def reason_text(reason: Optional[str]) -> str:
    texts: dict[str, str] = {StopReason.EOG: "finished", StopReason.MAX_TOKENS: "reached max tokens",
                             StopReason.STOPPED: "stopped", StopReason.CONTEXT: "context full"}
    return texts.get(reason or "", reason or "")


def compare_row_html(result: dict, spec: Optional[Summary] = None) -> str:
    """Compare's result row; ``spec`` (the speculative run's figures) adds when and why the draft was paused."""
    drafted = spec is None or spec.drafted > 0
    items = [
        _stat("plain tok/s", _fmt(result.get("plain_tps"), ".1f")),
        _stat("speculative tok/s", _fmt(result.get("spec_tps"), ".1f")),
        _stat("speedup, measured" if drafted else "ratio, nothing drafted", _fmt(result.get("speedup"), ".2f", "×"),
              "speculative tok/s ÷ plain tok/s" + ("" if drafted else ": both runs decoded plainly"),
              ("tdm-good" if (result.get("speedup") or 0) >= 1 else "tdm-bad") if drafted else ""),
        _stat(ACCEPTANCE, _fmt(result.get("acceptance_rate"), ".0%") if drafted else "–"),
        _stat("tokens / pass", _fmt(result.get("mean_accepted"), ".2f")),
    ]
    pause = pause_line(spec) if spec is not None else None
    if result.get("identical") is True:
        badge = '<span class="tdm-badge tdm-badge-ok">✓ identical output</span>'
    elif result.get("identical") is False and result.get("first_difference") is not None:
        badge = _parting_badge(int(result["first_difference"]) + 1, result.get("first_difference_gap"),
                               bool(result.get("near_tie")), result.get("first_difference_rounding"))
    else:
        badge = '<span class="tdm-badge">sampled (T &gt; 0): outputs are not expected to match</span>'
    order = esc(result.get("order", ""))
    note = f'<div class="tdm-note tdm-pause">{esc(pause)}</div>' if pause else ""
    return (f'<div class="tdm-stats">{"".join(items)}</div>{note}<div class="tdm-row">{badge}'
            f'<span class="tdm-muted">order: {order}</span></div>')


def _parting_badge(token: int, gap: Optional[float], near_tie: bool, rounding: Optional[float] = None) -> str:
    if gap is None:
        return f'<span class="tdm-badge tdm-badge-diff">✗ outputs differ from token {token}</span>'
    measured = (f" (batched passes moved this reply's top-two gaps by up to {rounding:.2g} on this machine)"
                if rounding is not None else "")
    if near_tie:  # rounding, not a fault: say so, or the user would distrust every other token
        why = (f"the target's top two choices there were {gap:.3g} logits apart, a near-tie that a batched pass "
               f"and a one-token step may round either way{measured}")
        return (f'<span class="tdm-badge tdm-badge-tie" title="{esc(why)}">≈ identical until a near-tie at token '
                f'{token} (gap {gap:.2g})</span>')
    why = f"the target's top two choices there were {gap:.3g} logits apart: not a rounding tie{measured}"
    return (f'<span class="tdm-badge tdm-badge-diff" title="{esc(why)}">✗ outputs differ from token {token} '
            f'(gap {gap:.2g}: not a near-tie)</span>')


def history_html(history: Sequence[dict]) -> str:
    """The session's comparisons: an SVG plot of speedup per run (axes labelled) and a table."""
    if not history:
        return '<div class="tdm-muted">No comparisons yet in this session.</div>'
    w, h, pad, left = 360, 130, 24, 34
    top = max(max((r.get("speedup") or 0) for r in history), 1.2)
    step = (w - left - pad) / max(len(history), 1)
    y_of = lambda s: h - pad - (s / top) * (h - 2 * pad)  # noqa: E731
    bars = []
    for i, r in enumerate(history):
        s = r.get("speedup") or 0.0
        bw = min(step * 0.7, 36.0)
        x = left + i * step + (step - bw) / 2
        cls = "tdm-svg-good" if s >= 1 else "tdm-svg-bad"
        bars.append(f'<rect class="{cls}" x="{x:.1f}" y="{y_of(s):.1f}" width="{bw:.1f}" '
                    f'height="{h - pad - y_of(s):.1f}"><title>run {i + 1}: {s:.2f}×</title></rect>'
                    f'<text x="{x + bw / 2:.1f}" y="{h - pad + 11}" text-anchor="middle" '
                    f'class="tdm-svg-label">{i + 1}</text>')
    svg = (f'<svg class="tdm-plot" viewBox="0 0 {w} {h}" role="img" aria-label="speedup per run">'
           f'<line x1="{left}" x2="{left}" y1="{pad - 6}" y2="{h - pad}" class="tdm-svg-axis"/>'
           f'<line x1="{left}" x2="{w - pad}" y1="{h - pad}" y2="{h - pad}" class="tdm-svg-axis"/>'
           f'<line x1="{left}" x2="{w - pad}" y1="{y_of(1.0):.1f}" y2="{y_of(1.0):.1f}" class="tdm-svg-ref"/>'
           f'<text x="{left - 4}" y="{y_of(1.0) + 3:.1f}" class="tdm-svg-label" text-anchor="end">1×</text>'
           f'<text x="{left - 4}" y="{y_of(top) + 3:.1f}" class="tdm-svg-label" text-anchor="end">{top:.1f}×</text>'
           f'<text x="4" y="{pad - 10}" class="tdm-svg-label">speedup (×)</text>'
           f'<text x="{w - pad}" y="{h - 2}" class="tdm-svg-label" text-anchor="end">comparison run</text>'
           f'{"".join(bars)}</svg>')
    rows = "".join(
        f'<tr><td>{i + 1}</td><td>{esc(str(r.get("prompt", ""))[:60])}</td><td>{_fmt(r.get("plain_tps"), ".1f")}</td>'
        f'<td>{_fmt(r.get("spec_tps"), ".1f")}</td><td>{_fmt(r.get("speedup"), ".2f", "×")}</td>'
        f'<td>{_fmt(r.get("acceptance_rate"), ".0%")}</td>'
        f'<td>{"yes" if r.get("identical") else "no" if r.get("identical") is False else "–"}</td></tr>'
        for i, r in enumerate(history)
    )
    table = ('<table class="tdm-table"><tr><th>#</th><th>prompt</th><th>plain tok/s</th><th>spec tok/s</th>'
             f'<th>speedup</th><th>acceptance</th><th>identical</th></tr>{rows}</table>')
    return f'<div class="tdm-history">{svg}{table}</div>'
